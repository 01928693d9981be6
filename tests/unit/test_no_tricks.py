"""No code of gputui changes how Python or a library behaves to save memory (issue 46): the live monitor
once left ssl out of sys.modules (its https alert webhook then crashed it), unloaded argparse after parsing,
set glibc's malloc arenas, froze and re-tuned the garbage collector and swapped the records' frozen
methods. Savings are plain code (a lighter widget, a module imported later); these calls are not."""

import ast
from pathlib import Path

import gputui

SOURCES = Path(gputui.__path__[0])
COLLECTOR = {"collect", "freeze", "unfreeze", "set_threshold", "disable", "enable", "set_debug"}
INTERPRETER = {"setswitchinterval", "setrecursionlimit"}
CHANGES_A_DICT = {"pop", "popitem", "setdefault", "update", "clear", "__setitem__", "__delitem__"}
# Loading the sitecustomize that the probe's bootstrap shadows, as the import system itself would have
# (module_from_spec, then into sys.modules before it runs): nothing is taken out or hidden.
ALLOWED = {("probe/bootstrap/sitecustomize.py", 'sys.modules["sitecustomize"] = module')}


def dotted(node: ast.AST) -> str:
    """``a.b.c`` for an attribute chain on a name, else ""."""
    if isinstance(node, ast.Attribute):
        inner = dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return node.id if isinstance(node, ast.Name) else ""


def tricks(tree: ast.AST) -> list[ast.AST]:
    """The nodes that tune the collector or the interpreter, call mallopt, set a class's attributes through
    ``type``, or change sys.modules."""
    found = []
    for node in ast.walk(tree):
        name = dotted(node.func) if isinstance(node, ast.Call) else ""
        module = name.rpartition(".")[0]
        last = node.func.attr if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else ""
        if (module == "gc" and last in COLLECTOR) or (module == "sys" and last in INTERPRETER) \
                or last == "mallopt" or name in ("type.__setattr__", "type.__delattr__") \
                or (module == "sys.modules" and last in CHANGES_A_DICT):
            found.append(node)
        elif isinstance(node, ast.ImportFrom) and node.module == "gc" \
                and any(alias.name in COLLECTOR for alias in node.names):
            found.append(node)
        elif isinstance(node, ast.Subscript) and not isinstance(node.ctx, ast.Load) \
                and dotted(node.value) == "sys.modules":
            found.append(node)
    return found


def test_no_module_of_gputui_tunes_python_or_its_libraries():
    found = []
    for path in sorted(SOURCES.rglob("*.py")):
        text = path.read_text()
        where = str(path.relative_to(SOURCES))
        for node in tricks(ast.parse(text)):
            line = text.splitlines()[node.lineno - 1].strip()
            if (where, line) not in ALLOWED:
                found.append(f"gputui/{where}:{node.lineno}: {line}")
    assert found == []


def test_each_kind_of_trick_is_found():
    """What the test above looks for, each as issue 46 found it, and what it leaves alone."""
    said = [
        'sys.modules.setdefault("ssl", None)', "sys.modules.pop(name, None)", 'sys.modules["x"] = None',
        'del sys.modules["argparse"]', "gc.freeze()", "gc.set_threshold(700, 10, 1)", "gc.collect()",
        "from gc import freeze", "ctypes.CDLL(None).mallopt(-8, 1)", "sys.setswitchinterval(0.1)",
        'type.__setattr__(cls, "__setattr__", f)',
    ]
    assert [len(tricks(ast.parse(line))) for line in said] == [1] * len(said)
    left = ['sys.modules.get("torch")', '"torch" in sys.modules', "gc.get_threshold()", "gc.is_tracked(x)",
            "ctypes.CDLL(None).mallinfo2", 'setattr(namespace, "x", 1)']
    assert [len(tricks(ast.parse(line))) for line in left] == [0] * len(left)
