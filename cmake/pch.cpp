// Carries the precompiled header that the tests, examples and benches share.
