// RUN: python -P %S/Inputs/user_rules_opt.py %s --split-input-file -shardc-populate-op-sharding-rules | filecheck %s --check-prefix=RULE
// RUN: python -P %S/Inputs/user_rules_opt.py %s --split-input-file -shardc-propagation-pipeline | filecheck %s --check-prefix=PROP
// RUN: shardc-opt %s --split-input-file -shardc-propagation-pipeline | filecheck %s --check-prefix=NONE

// A registered rule for a custom call target: populated like a built-in rule
// (marked custom), and propagation shards the kernel's result along i.
sdy.mesh @m = <["x"=2, "y"=4]>
// RULE-LABEL: func @kernel
// RULE: stablehlo.custom_call @my_matmul{{.*}}sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [j, k])->([i, k]) {i=16, j=32, k=8} reduction={j}, custom>
// PROP-LABEL: func @kernel
// PROP: stablehlo.custom_call @my_matmul{{.*}}sdy.sharding = #sdy.sharding_per_value<[<@m, [{"x"}, {}]>]>
// Without the rule the kernel is opaque and its result stays unsharded.
// NONE-LABEL: func @kernel
// NONE-NOT: sdy.sharding_per_value<[<@m, [{"x"}
func.func @kernel(%arg0: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@m, [{"x"}, {"y"}]>}, %arg1: tensor<32x8xf32> {sdy.sharding = #sdy.sharding<@m, [{"y"}, {}]>}) -> tensor<16x8xf32> {
  %0 = stablehlo.custom_call @my_matmul(%arg0, %arg1) : (tensor<16x32xf32>, tensor<32x8xf32>) -> tensor<16x8xf32>
  %1 = stablehlo.tanh %0 : tensor<16x8xf32>
  return %1 : tensor<16x8xf32>
}
