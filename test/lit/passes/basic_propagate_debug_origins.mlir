// RUN: shardc-opt %s -sdy-basic-propagate=debug-sharding-origins=true | filecheck %s
// RUN: shardc-opt %s -sdy-user-priority-propagate=debug-sharding-origins=true | filecheck %s

// Shardy's debug-sharding-origins: each axis says which user sharding it came from.

sdy.mesh @mesh = <["a"=2, "b"=2]>

// CHECK-LABEL: func.func @main
// CHECK-SAME: sdy.sharding_origins = {a = "self"}
// CHECK-SAME: sdy.sharding_origins = {a = "input: 0"}
// CHECK-SAME: sdy.sharding_origins = {b = "self"}
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {?}]>}, %arg1: tensor<8x8xf32>) -> (tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{?}, {"b"}]>}) {
  // CHECK: stablehlo.add {{.*}}sdy.sharding_origins = [{a = "input: 0"}]
  %0 = stablehlo.add %arg0, %arg1 : tensor<8x8xf32>
  // CHECK: sdy.sharding_constraint {{.*}}{sdy.sharding_origin_name = "constraint_0", sdy.sharding_origins = {a = "input: 0"}}
  %1 = sdy.sharding_constraint %0 <@mesh, [{?}, {?}]> : tensor<8x8xf32>
  // CHECK: stablehlo.optimization_barrier {{.*}}sdy.sharding_origins = [{b = "output: 0"}, {b = "output: 0"}]
  %2:2 = stablehlo.optimization_barrier %1, %arg1 : tensor<8x8xf32>, tensor<8x8xf32>
  %3 = stablehlo.multiply %2#0, %2#1 : tensor<8x8xf32>
  return %3 : tensor<8x8xf32>
}

// An operand that already carries a sharding is credited to the constraint it
// feeds (before func inputs are considered), as Shardy does.
// CHECK-LABEL: func.func @constraint_on_sharded_operand
// CHECK-SAME: sdy.sharding_origins = {a = "[[SECOND:constraint_[0-9]+]]"}
func.func @constraint_on_sharded_operand(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {?}]>}, %arg1: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // CHECK: stablehlo.add {{.*}}sdy.sharding_origins = [{b = "[[FIRST:constraint_[0-9]+]]"}]
  // CHECK: sdy.sharding_constraint {{.*}}{sdy.sharding_origin_name = "[[FIRST]]"
  %0 = stablehlo.add %arg0, %arg1 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"b"}, {?}]>]>} : tensor<8x8xf32>
  %1 = sdy.sharding_constraint %0 <@mesh, [{"b"}, {?}]> : tensor<8x8xf32>
  // CHECK: sdy.sharding_constraint %arg0 {{.*}}{sdy.sharding_origin_name = "[[SECOND]]", sdy.sharding_origins = {a = "self"}}
  %2 = sdy.sharding_constraint %arg0 <@mesh, [{"a"}, {?}]> : tensor<8x8xf32>
  %3 = stablehlo.multiply %1, %2 : tensor<8x8xf32>
  return %3 : tensor<8x8xf32>
}
