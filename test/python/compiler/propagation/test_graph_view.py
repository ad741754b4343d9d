"""``GraphView``: a graph read with some attributes replaced, views stacked flat."""

from types import SimpleNamespace

from shardc.compiler.propagation.graph import GraphView


def test_a_view_replaces_its_attributes_and_reads_the_rest_from_the_graph():
    graph = SimpleNamespace(op_name=["a", "b"], uses=[[], []])
    view = GraphView(graph, op_name=["a", "c"])
    assert view.op_name == ["a", "c"]
    assert view.uses is graph.uses
    assert graph.op_name == ["a", "b"]


def test_a_view_of_a_view_reads_the_graph_with_both_replacements_the_later_first():
    graph = SimpleNamespace(op_name=["a"], uses=[[]], op_blocks=[[]])
    first = GraphView(graph, op_name=["x"], uses=[[(0, 0)]])
    second = GraphView(first, op_name=["y"], merged_ops={0})
    assert second._graph is graph
    assert (second.op_name, second.uses, second.merged_ops) == (["y"], [[(0, 0)]], {0})
    assert second.op_blocks is graph.op_blocks
    assert first.op_name == ["x"] and not hasattr(first, "merged_ops")
