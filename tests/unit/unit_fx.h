/*
 * unit_fx.h - how a cmocka test that needs a fresh fixture is listed in main(): EM_FX(test) runs
 * test between its file's setup() and teardown(); EM_FX_OF(test, fx) between fx_setup() and
 * fx_teardown(), for files with more than one fixture or another name for it.
 *
 * Header-only macros, for cmocka tests: include it after <cmocka.h>. Owns nothing; each state
 * the fixture makes is the setup's to make and the teardown's to release, as in cmocka.
 */
#ifndef EDGEMON_TESTS_UNIT_UNIT_FX_H
#define EDGEMON_TESTS_UNIT_UNIT_FX_H

#define EM_FX(test)        cmocka_unit_test_setup_teardown(test, setup, teardown)
#define EM_FX_OF(test, fx) cmocka_unit_test_setup_teardown(test, fx##_setup, fx##_teardown)

#endif /* EDGEMON_TESTS_UNIT_UNIT_FX_H */
