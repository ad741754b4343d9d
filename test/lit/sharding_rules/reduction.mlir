// RUN: shardc-opt %s -shardc-populate-op-sharding-rules | filecheck %s
// RUN: shardc-opt %s -sdy-populate-op-sharding-rules | filecheck %s
// RUN: shardc-opt %s -shardc-populate-op-sharding-rules='conservative-propagation=true' | filecheck %s --check-prefix=CONS

// CHECK-LABEL: func @reduce(
// CHECK: stablehlo.reduce{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [i, j], [], [])->([i], [i]) {i=8, j=4} reduction={j}>}
// CHECK: stablehlo.add{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([], [])->([])>}
// CHECK: stablehlo.add{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([], [])->([])>}
// CHECK-LABEL: func @reduce_window(
// CHECK: stablehlo.add{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([], [])->([])>}
// CHECK: {sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [])->([i, j]) {i=8, j=4} permutation={j}>}
// CHECK-LABEL: func @select_and_scatter(
// CHECK: stablehlo.compare{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([], [])->([])>}
// CHECK: stablehlo.add{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([], [])->([])>}
// CHECK: {sdy.sharding_rule = #sdy.op_sharding_rule<([j, k], [i, k], [])->([j, k]) {i=4, j=8, k=4} need_replication={i} permutation={j}>}
// CHECK-LABEL: func @sort(
// CHECK: stablehlo.compare{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([], [])->([])>}
// CHECK: {sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=4} need_replication={j}>}
// CHECK: stablehlo.compare{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([], [])->([])>}
// CHECK: {sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=1, j=4} need_replication={j} blocked_propagation={j}>}

// CONS-LABEL: func @reduce(
// CONS: stablehlo.reduce{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [i, j], [], [])->([i], [i]) {i=8, j=4} reduction={j}>}
// CONS: stablehlo.add{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([], [])->([])>}
// CONS: stablehlo.add{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([], [])->([])>}
// CONS-LABEL: func @reduce_window(
// CONS: stablehlo.add{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([], [])->([])>}
// CONS: {sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [])->([i, j]) {i=8, j=4} permutation={j} blocked_propagation={j}>}
// CONS-LABEL: func @select_and_scatter(
// CONS: stablehlo.compare{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([], [])->([])>}
// CONS: stablehlo.add{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([], [])->([])>}
// CONS: {sdy.sharding_rule = #sdy.op_sharding_rule<([j, k], [i, k], [])->([j, k]) {i=4, j=8, k=4} need_replication={i} permutation={j} blocked_propagation={i, j}>}
// CONS-LABEL: func @sort(
// CONS: stablehlo.compare{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([], [])->([])>}
// CONS: {sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=4} need_replication={j}>}
// CONS: stablehlo.compare{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([], [])->([])>}
// CONS: {sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=1, j=4} need_replication={j} blocked_propagation={j}>}

// Multi-operand reduce: reduced dims are reduction factors of the inputs only.
func.func @reduce(%arg0: tensor<8x4xf32>, %arg1: tensor<8x4xi32>, %arg2: tensor<f32>, %arg3: tensor<i32>) -> (tensor<8xf32>, tensor<8xi32>) {
  %0:2 = stablehlo.reduce(%arg0 init: %arg2), (%arg1 init: %arg3) across dimensions = [1] : (tensor<8x4xf32>, tensor<8x4xi32>, tensor<f32>, tensor<i32>) -> (tensor<8xf32>, tensor<8xi32>)
    reducer(%a: tensor<f32>, %b: tensor<f32>) (%c: tensor<i32>, %d: tensor<i32>) {
      %1 = stablehlo.add %a, %b : tensor<f32>
      %2 = stablehlo.add %c, %d : tensor<i32>
      stablehlo.return %1, %2 : tensor<f32>, tensor<i32>
    }
  return %0#0, %0#1 : tensor<8xf32>, tensor<8xi32>
}

// reduce_window: a cumsum-style window is a permutation factor; trivial dims pass through.
func.func @reduce_window(%arg0: tensor<8x4xf32>, %arg1: tensor<f32>) -> tensor<8x4xf32> {
  %0 = "stablehlo.reduce_window"(%arg0, %arg1) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %1 = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %1 : tensor<f32>
  }) {window_dimensions = array<i64: 1, 4>, padding = dense<[[0, 0], [3, 0]]> : tensor<2x2xi64>} : (tensor<8x4xf32>, tensor<f32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// select_and_scatter: windowed dims get a source-only nr and an operand/result perm factor.
func.func @select_and_scatter(%arg0: tensor<8x4xf32>, %arg1: tensor<4x4xf32>, %arg2: tensor<f32>) -> tensor<8x4xf32> {
  %0 = "stablehlo.select_and_scatter"(%arg0, %arg1, %arg2) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %1 = stablehlo.compare GE, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %1 : tensor<i1>
  }, {
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %1 = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %1 : tensor<f32>
  }) {window_dimensions = array<i64: 2, 1>, window_strides = array<i64: 2, 1>} : (tensor<8x4xf32>, tensor<4x4xf32>, tensor<f32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// sort: the sort dim needs replication (blocked when it is the only non-trivial dim).
func.func @sort(%arg0: tensor<8x4xf32>, %arg1: tensor<1x4xf32>) -> (tensor<8x4xf32>, tensor<1x4xf32>) {
  %0 = "stablehlo.sort"(%arg0) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %1 = stablehlo.compare GT, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %1 : tensor<i1>
  }) {dimension = 1 : i64} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %2 = "stablehlo.sort"(%arg1) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %1 = stablehlo.compare GT, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %1 : tensor<i1>
  }) {dimension = 1 : i64} : (tensor<1x4xf32>) -> tensor<1x4xf32>
  return %0, %2 : tensor<8x4xf32>, tensor<1x4xf32>
}
