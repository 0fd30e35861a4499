/*
 * fixtures.h - where the unit tests find tests/fixtures: EM_FIXTURES_DIR, its absolute path,
 * which tests/CMakeLists.txt defines for every test, and BOARDS_DIR, the board trees
 * (tests/fixtures/boards/<board>/...) the collectors read as their sys and proc roots.
 */
#ifndef EDGEMON_TESTS_UNIT_FIXTURES_H
#define EDGEMON_TESTS_UNIT_FIXTURES_H

#ifndef EM_FIXTURES_DIR
#error "EM_FIXTURES_DIR (absolute path of tests/fixtures) must be defined"
#endif
#define BOARDS_DIR EM_FIXTURES_DIR "/boards"

#endif
