#pragma once
// tp is header-only, and may also be used with a compiled part, as Asio and Boost.Beast may.
//
// Header-only (the default): include tp's headers and link tp::tp. Every translation unit that
// uses the trainer compiles, among the templates, a few of tp's ordinary functions again: the
// model summary, the threads choice, gradient clipping, the loss scaler, the signal handlers,
// the option checks, the torch.save reader and writer. They are cold (once per run, or per
// checkpoint) and not templates, yet at -O2 they were about a third of the object code of a
// minimal training program (bench/compile_time.sh).
//
// With the compiled part: link tp::compiled instead (CMake; it defines TP_SEPARATE_COMPILATION
// for every file of the program that links it, and builds src/compiled_part.cpp once). Those
// functions are then declared in the headers and compiled once, and a trainer's translation
// unit compiles only what is a template over the program's types. A program built by hand
// defines TP_SEPARATE_COMPILATION in every file and compiles src/compiled_part.cpp with it.
// Every file of one program must agree: mixing the two modes is not supported.
//
// For a header with such functions: declare each `TP_DECL` (in the class, no TP_DECL) where it
// is part of the contract, and define it `TP_DECL` at the end of the header inside
// `#if TP_DEFINE_COMPILED_PART`, with the includes only the definitions need.
#if defined(TP_SEPARATE_COMPILATION)
#define TP_DECL
#if defined(TP_BUILDING_COMPILED_PART)
#define TP_DEFINE_COMPILED_PART 1
#else
#define TP_DEFINE_COMPILED_PART 0
#endif
#else
#if defined(TP_BUILDING_COMPILED_PART)
#error "src/compiled_part.cpp is compiled with TP_SEPARATE_COMPILATION defined (CMake's tp::compiled target does)"
#endif
// Marks a function of the compiled part: `inline` when header-only (every translation unit that
// uses it defines it), empty with TP_SEPARATE_COMPILATION (src/compiled_part.cpp defines it once).
#define TP_DECL inline
// Whether this translation unit compiles the compiled part's definitions (the `#if` at the end of
// such headers): always when header-only, only src/compiled_part.cpp with TP_SEPARATE_COMPILATION.
#define TP_DEFINE_COMPILED_PART 1
#endif
