// RUN: shardc-opt --help | filecheck %s
// RUN: shardc-opt -h | filecheck %s
// RUN: shardc-opt --version | filecheck %s --check-prefix=VERSION

// CHECK: usage: shardc-opt
// CHECK: --split-input-file
// CHECK: --verify-diagnostics
// CHECK: pass flags
// CHECK: --shardc-drop-shardings {{ *}}Remove all sdy shardings, sharding ops and mesh symbols
// CHECK: --shardc-lift-inlined-meshes {{ *}}Replace inline meshes in shardings by de-duplicated sdy.mesh symbols
// CHECK: --sdy-lift-inlined-meshes {{ *}}Replace inline meshes {{.*}}(alias of shardc-lift-inlined-meshes)
// VERSION: shardc-opt 0.1.0
