# packaging/deb.cmake - the Debian packages, made by CPack's DEB generator from a build tree
# that is already built (docs/PACKAGING.md says why CPack and not a debian/ directory). It owns
# the package metadata, the maintainer scripts in deb/ and the per-package copyright and
# changelog; the install() rules beside each program say what goes into which package through
# their COMPONENT: agent -> edgemon-agent, host -> edgemon-host, python -> python3-edgemon.
# `cpack --config BUILD/CPackConfig.cmake` writes the .deb files of BUILD's architecture: amd64
# from a native tree, arm64 from the aarch64 cross tree (boards/toolchains/), where the
# architecture-independent python3-edgemon is left out. Configure with
# -DCMAKE_INSTALL_PREFIX=/usr: the agent compiles in where it finds the board profiles.
include(GNUInstallDirs)

set(EM_DEB_DIR ${CMAKE_CURRENT_LIST_DIR}/deb)
set(EM_DEB_RELEASE 1)
set(EM_DEB_VERSION ${PROJECT_VERSION}-${EM_DEB_RELEASE})
set(EM_DEB_MAINTAINER
  "edgemon maintainers <maintainers@users.noreply.a-seed-6f2eefb0.example>")

# Debian's name for the architecture this tree is built for. Left unset for a native build of
# another architecture: CPack asks dpkg then.
set(EM_DEB_ARCH "")
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
  set(EM_DEB_ARCH arm64)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|amd64|AMD64)$")
  set(EM_DEB_ARCH amd64)
elseif(CMAKE_CROSSCOMPILING)
  message(WARNING "packaging: no Debian architecture for ${CMAKE_SYSTEM_PROCESSOR}; "
    "cpack would label the packages with this machine's")
endif()

# Every package carries its copyright and a Debian changelog (gzip -9n, as policy asks) in
# /usr/share/doc/<package>/ (em_deb_package below). Component installs only: `cmake --install`
# without a component leaves them out.
configure_file(${EM_DEB_DIR}/changelog.in ${CMAKE_CURRENT_BINARY_DIR}/packaging/changelog.Debian
  @ONLY)
execute_process(COMMAND gzip -9nf ${CMAKE_CURRENT_BINARY_DIR}/packaging/changelog.Debian
  RESULT_VARIABLE em_deb_gzip)
if(NOT em_deb_gzip EQUAL 0)
  message(FATAL_ERROR "packaging: gzip failed on the Debian changelog")
endif()

# em_deb_package(COMPONENT NAME DEPENDS SUGGESTS FILE...): COMPONENT's package is NAME; DEPENDS
# is added to what dpkg-shlibdeps finds; FILE... are its control files (maintainer scripts,
# conffiles) in deb/COMPONENT/; its copyright and changelog go to /usr/share/doc/NAME.
macro(em_deb_package component name depends suggests)
  string(TOUPPER ${component} em_upper)
  set(CPACK_DEBIAN_${em_upper}_PACKAGE_NAME ${name})
  set(CPACK_DEBIAN_${em_upper}_PACKAGE_DEPENDS "${depends}")
  set(CPACK_DEBIAN_${em_upper}_PACKAGE_SUGGESTS "${suggests}")
  set(CPACK_DEBIAN_${em_upper}_PACKAGE_CONTROL_EXTRA ${ARGN})
  list(TRANSFORM CPACK_DEBIAN_${em_upper}_PACKAGE_CONTROL_EXTRA
    PREPEND ${EM_DEB_DIR}/${component}/)
  install(FILES ${EM_DEB_DIR}/copyright ${CMAKE_CURRENT_BINARY_DIR}/packaging/changelog.Debian.gz
    DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${name} COMPONENT ${component} EXCLUDE_FROM_ALL)
endmacro()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME edgemon)
set(CPACK_PACKAGE_VENDOR "edgemon maintainers")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT ${EM_DEB_MAINTAINER})
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/debs)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
if(CMAKE_CROSSCOMPILING)
  set(CPACK_COMPONENTS_ALL agent host)
else()
  set(CPACK_COMPONENTS_ALL agent host python)
endif()

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE ${EM_DEB_RELEASE})
set(CPACK_DEBIAN_PACKAGE_MAINTAINER ${EM_DEB_MAINTAINER})
set(CPACK_DEBIAN_PACKAGE_SOURCE edgemon)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
if(EM_DEB_ARCH)
  set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE ${EM_DEB_ARCH})
endif()

# Depends: dpkg-shlibdeps on the programs (the libraries actually linked), plus what the
# maintainer scripts run and what the agent opens with dlopen (libdw1: profile/symbols.h; its
# functions are ELFUTILS_0.158). The arm64 tree links the Debian 11 sysroot's libraries
# (boards/toolchains/): dpkg-shlibdeps searches its directories first (-l), finds each library
# below the sysroot's DEBIAN/, and reads the versions from DEBIAN/symbols and DEBIAN/shlibs
# there, the symbols and shlibs files of bullseye's packages (scripts/lib/cross.sh). So the
# minimum versions are those of the oldest baseline's packages, never this machine's.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
if(CMAKE_CROSSCOMPILING AND EM_CROSS_SYSROOT AND EM_CROSS_TRIPLET)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS
    "${EM_CROSS_SYSROOT}/usr/lib/${EM_CROSS_TRIPLET}"
    "${EM_CROSS_SYSROOT}/lib/${EM_CROSS_TRIPLET}")
endif()
em_deb_package(agent edgemon-agent "systemd, init-system-helpers (>= 1.54~), libdw1 (>= 0.158)"
  "python3-edgemon, mosquitto" postinst prerm postrm conffiles)
set(CPACK_COMPONENT_AGENT_DESCRIPTION
  "edge monitor agent for inference pipelines on ARM boards
edgemon-agent runs as a systemd service beside a Python inference process on a
Jetson-class board. It samples PMU counters, memory, pressure and the board's
sensors, ingests per-frame latency spans, enforces latency budgets, raises
degradation signals the process reads every frame, and publishes compact CBOR
telemetry over MQTT.
The service is enabled on installation and started once
/etc/edgemon/edgemon-agent.ini passes edgemon-agent --check.")

em_deb_package(host edgemon-host "init-system-helpers (>= 1.54~)" mosquitto
  postinst prerm postrm conffiles)
set(CPACK_COMPONENT_HOST_DESCRIPTION
  "edge monitor host tools: edgemon-cli, edgemon-aggregator, edgemon-sim
edgemon-cli follows a fleet of edgemon agents through their MQTT broker (tail,
status, record, replay, compare). edgemon-aggregator keeps the fleet's history
in SQLite and serves Prometheus metrics, a dashboard and a JSON API; its
systemd unit is installed but not enabled. edgemon-sim publishes simulated
devices for tests and benchmarks.")

em_deb_package(python python3-edgemon "python3:any" "" postinst prerm)
set(CPACK_DEBIAN_PYTHON_PACKAGE_ARCHITECTURE all)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_COMPONENT_PYTHON_DESCRIPTION
  "edge monitor client for Python inference processes
The edgemon module reports per-stage latency spans of each frame to
edgemon-agent through shared-memory rings (or unix datagrams), never blocking
and never raising when the agent is absent, and reads the degradation level
the agent sets. Standard library only.")

include(CPack)
