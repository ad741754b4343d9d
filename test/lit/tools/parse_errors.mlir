// RUN: not shardc-opt %s --split-input-file 2>&1 | filecheck %s
// CHECK-NOT: Traceback

// CHECK: {{.*}}parse_errors.mlir:[[# @LINE + 2]]:1: error: 'func.func' op arg 0 - unknown mesh: @nope
// CHECK-NEXT: func.func @unknown_mesh
func.func @unknown_mesh(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@nope, [{}]>}) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}
// CHECK: note: see current operation

// -----

// CHECK: {{.*}}parse_errors.mlir:[[# @LINE + 2]]:3: error: type of return operand 0 ('tensor<8xf32>') doesn't match function result type ('tensor<4xf32>') in function @bad_return
func.func @bad_return(%arg0: tensor<8xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<8xf32>
}

// -----

// CHECK: {{.*}}parse_errors.mlir:[[# @LINE + 1]]:46: error: use of undeclared SSA value name
func.func @undef() -> tensor<8xf32> { return %nope : tensor<8xf32> }
// CHECK-NOT: Traceback
