// RUN: not shardc-opt %s --split-input-file 2>&1 | filecheck %s
// CHECK-NOT: Traceback
// CHECK: hostile_bad_mesh.mlir:[[# @LINE + 2]]:{{[0-9]+}}: error: {{.*}}
// CHECK-NOT: Traceback
sdy.mesh @m = <["x"=2, "x"=4]>

// -----

// CHECK: hostile_bad_mesh.mlir:[[# @LINE + 1]]:{{[0-9]+}}: error: {{.*}}
sdy.mesh @n = <["x"=-3]>
