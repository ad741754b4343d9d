// RUN: not shardc-opt %s --shardc-drop-sharding 2>&1 | filecheck %s --check-prefix=CLOSE
// RUN: not shardc-opt %s --pass-pipeline='builtin.module(shardc-lift-inlined-mesh)' 2>&1 | filecheck %s --check-prefix=PIPE
// RUN: not shardc-opt %s --shardc-drop-shardings='keep-mesh=true' 2>&1 | filecheck %s --check-prefix=OPTION
// RUN: not shardc-opt %s --shardc-lift-inlined-meshes='frobnicate=1' 2>&1 | filecheck %s --check-prefix=OPTION2
// RUN: not shardc-opt %s --sdy-import-pipeline 2>&1 | filecheck %s --check-prefix=NATIVE
// RUN: not shardc-opt %s --pass-pipeline='builtin.module(sdy-import-pipeline)' 2>&1 | filecheck %s --check-prefix=NATIVE
// RUN: not shardc-opt %s --sdy-reshard-to-collectives 2>&1 | filecheck %s --check-prefix=NOTNATIVE
// RUN: not shardc-opt %s -sdy-propogation-pipeline 2>&1 | filecheck %s --check-prefix=TYPO
// RUN: not shardc-opt %s -sdy-zzz 2>&1 | filecheck %s --check-prefix=ZZZ
// RUN: not shardc-opt %s -foo-bar 2>&1 | filecheck %s --check-prefix=FOO
// RUN: not shardc-opt %s --split-input-fil 2>&1 | filecheck %s --check-prefix=FLAG
// RUN: not shardc-opt %s --no-such-pass-at-all 2>&1 | filecheck %s --check-prefix=NOMATCH

// CLOSE: shardc-opt: error: unknown pass 'shardc-drop-sharding'; did you mean 'shardc-drop-shardings'
// PIPE: shardc-opt: error: unknown pass 'shardc-lift-inlined-mesh'; did you mean 'shardc-lift-inlined-meshes'
// OPTION: shardc-opt: error: pass 'shardc-drop-shardings' has no option 'keep-mesh'; did you mean 'keep-meshes'?
// OPTION2: shardc-opt: error: pass 'shardc-lift-inlined-meshes' has no option 'frobnicate'; its options are 'add-stablehlo-mesh', 'report-duplicates'
// NATIVE: shardc-opt: error: pass 'sdy-import-pipeline' is a native pass of another project
// NOTNATIVE: shardc-opt: error: unknown pass 'sdy-reshard-to-collectives'; did you mean
// TYPO: shardc-opt: error: unknown pass 'sdy-propogation-pipeline'; did you mean 'sdy-propagation-pipeline'
// ZZZ: shardc-opt: error: unknown pass 'sdy-zzz'; 'shardc-opt --list-passes' lists the passes
// FOO: shardc-opt: error: unknown pass or option '-foo-bar'; 'shardc-opt --list-passes' lists the passes and '--help' the options
// FLAG: shardc-opt: error: unknown pass or option '--split-input-fil'; did you mean '--split-input-file'
// NOMATCH: shardc-opt: error: unknown pass or option '--no-such-pass-at-all'
func.func @f() {
  return
}
