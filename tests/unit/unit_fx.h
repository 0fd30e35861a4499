/*
 * unit_fx.h - how a cmocka test that needs a fresh fixture is listed in main(): EM_FX(test) runs
 * test between its file's setup() and teardown(); EM_FX_OF(test, fx) between fx_setup() and
 * fx_teardown(), for files with more than one fixture or another name for it.
 * EM_RUN_UNIT_OR_LIVE(argc, argv, unit, live) is the main() of a file whose tests on the live
 * kernel run only when asked: the array live with --live as the first argument (ctest's
 * integration label), the array unit otherwise.
 *
 * Header-only macros, for cmocka tests: include it after <cmocka.h>. Owns nothing; each state
 * the fixture makes is the setup's to make and the teardown's to release, as in cmocka.
 */
#ifndef EDGEMON_TESTS_UNIT_UNIT_FX_H
#define EDGEMON_TESTS_UNIT_UNIT_FX_H

#include <string.h>

#define EM_FX(test)        cmocka_unit_test_setup_teardown(test, setup, teardown)
#define EM_FX_OF(test, fx) cmocka_unit_test_setup_teardown(test, fx##_setup, fx##_teardown)

#define EM_RUN_UNIT_OR_LIVE(argc, argv, unit, live)                                                \
  ((argc) > 1 && strcmp((argv)[1], "--live") == 0                                                  \
       ? cmocka_run_group_tests_name("live", live, NULL, NULL)                                     \
       : cmocka_run_group_tests_name("unit", unit, NULL, NULL))

#endif /* EDGEMON_TESTS_UNIT_UNIT_FX_H */
