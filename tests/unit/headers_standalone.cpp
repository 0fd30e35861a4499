// headers_standalone.cpp - every public proto header compiles on its own as C++ (a ROS 2 node
// is C++). Built as part of the tests; a header that breaks C++ breaks the build.
#include "edgemon/proto.h"
#include "edgemon/wire.h"

static_assert(sizeof(em_value_t) >= 16, "em_value_t holds a type and a 64-bit payload");
