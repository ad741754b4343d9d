// RUN: shardc-opt %s -shardc-populate-op-sharding-rules | filecheck %s
// RUN: shardc-opt %s -sdy-populate-op-sharding-rules | filecheck %s

// CHECK-LABEL: func @pointwise(
// CHECK: stablehlo.add{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [i, j])->([i, j]) {i=8, j=4}>}
// CHECK: stablehlo.tanh{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=4}>}
// CHECK: stablehlo.compare{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [i, j])->([i, j]) {i=8, j=4}>}
// CHECK: stablehlo.convert{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=4}>}
// CHECK: stablehlo.select{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([], [i, j], [i, j])->([i, j]) {i=8, j=4}>}
// CHECK: stablehlo.select{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [i, j], [i, j])->([i, j]) {i=8, j=4}>}
// CHECK: stablehlo.clamp{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([], [i, j], [])->([i, j]) {i=8, j=4}>}
// CHECK: stablehlo.add{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([], [])->([])>}
// CHECK: sdy.sharding_constraint{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=4}>}
// CHECK-LABEL: func @bitcast(
// CHECK: stablehlo.bitcast_convert{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=4}>}
// CHECK: stablehlo.bitcast_convert{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j, k]) {i=8, j=4, k=2} need_replication={k}>}
// CHECK: stablehlo.bitcast_convert{{.*}}{sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i]) {i=8, j=2} need_replication={j}>}

sdy.mesh @mesh = <["a"=2, "b"=2]>

// Pointwise ops share one factor per result dim; scalars stay unmapped.
func.func @pointwise(%arg0: tensor<8x4xf32>, %arg1: tensor<8x4xf32>, %arg2: tensor<8x4xi32>, %arg3: tensor<i1>, %arg4: tensor<f32>) -> tensor<8x4xf32> {
  %0 = stablehlo.add %arg0, %arg1 : tensor<8x4xf32>
  %1 = stablehlo.tanh %0 : tensor<8x4xf32>
  %2 = stablehlo.compare LT, %0, %1 : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xi1>
  %3 = stablehlo.convert %arg2 : (tensor<8x4xi32>) -> tensor<8x4xf32>
  %4 = stablehlo.select %arg3, %3, %1 : (tensor<i1>, tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %5 = stablehlo.select %2, %4, %1 : (tensor<8x4xi1>, tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %6 = stablehlo.clamp %arg4, %5, %arg4 : (tensor<f32>, tensor<8x4xf32>, tensor<f32>) -> tensor<8x4xf32>
  %7 = stablehlo.add %arg4, %arg4 : tensor<f32>
  %8 = sdy.sharding_constraint %6 <@mesh, [{"a"}, {?}]> : tensor<8x4xf32>
  return %8 : tensor<8x4xf32>
}

// bitcast_convert: equal widths are pointwise; a width change adds a minor nr factor.
func.func @bitcast(%arg0: tensor<8x4xf32>, %arg1: tensor<8x2xf16>) -> (tensor<8x4xi32>, tensor<8x4x2xf16>, tensor<8xf32>) {
  %0 = stablehlo.bitcast_convert %arg0 : (tensor<8x4xf32>) -> tensor<8x4xi32>
  %1 = stablehlo.bitcast_convert %arg0 : (tensor<8x4xf32>) -> tensor<8x4x2xf16>
  %2 = stablehlo.bitcast_convert %arg1 : (tensor<8x2xf16>) -> tensor<8xf32>
  return %0, %1, %2 : tensor<8x4xi32>, tensor<8x4x2xf16>, tensor<8xf32>
}
