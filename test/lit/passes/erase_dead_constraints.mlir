// RUN: shardc-opt %s -split-input-file -shardc-erase-dead-constraints | filecheck %s

// A constraint nothing reads is erased, with the effect-free ops and the
// constraints that only fed it; a constraint whose result is used stays.
sdy.mesh @mesh = <["x"=8]>

// CHECK-LABEL: func @dead_in_loop_body
// CHECK:       stablehlo.while(%[[I:.*]] = %c, %[[H:.*]] = %arg0, %[[W:.*]] = %arg1)
// CHECK:       } do {
// CHECK-NOT:   stablehlo.multiply
// CHECK-NOT:   sdy.sharding_constraint %[[W]]
// CHECK:       %[[KEPT:.*]] = sdy.sharding_constraint %[[H]] <@mesh, [{"x"}]>
// CHECK-NEXT:  stablehlo.add %[[KEPT]], %[[KEPT]]
// CHECK-NEXT:  stablehlo.return %{{.*}}, %{{.*}}, %[[W]]
func.func @dead_in_loop_body(%arg0: tensor<8xf32>, %arg1: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %0:3 = stablehlo.while(%i = %c, %h = %arg0, %w = %arg1) : tensor<i32>, tensor<8xf32>, tensor<8xf32>
  cond {
    %c3 = stablehlo.constant dense<3> : tensor<i32>
    %p = stablehlo.compare LT, %i, %c3, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %j = stablehlo.add %i, %c1 : tensor<i32>
    %inner = sdy.sharding_constraint %w <@mesh, [{}]> : tensor<8xf32>
    %twice = stablehlo.multiply %inner, %inner : tensor<8xf32>
    %dead = sdy.sharding_constraint %twice <@mesh, [{}]> : tensor<8xf32>
    %kept = sdy.sharding_constraint %h <@mesh, [{"x"}]> : tensor<8xf32>
    %y = stablehlo.add %kept, %kept : tensor<8xf32>
    stablehlo.return %j, %y, %w : tensor<i32>, tensor<8xf32>, tensor<8xf32>
  }
  return %0#1, %0#2 : tensor<8xf32>, tensor<8xf32>
}
