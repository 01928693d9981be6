"""Where a leak is kept: the user's variable that holds more every step, and the line that adds to it.

A leak's allocation site says where the tensors were made (a model's forward); the fix is where the job
keeps them (``total_loss += loss``, ``history.append(loss)``, ``cache[key] = x``). On the training
thread, at two step ends some steps apart, the probe sizes what the user's frames on the stack can
reach by name (locals, their objects' attributes, the module's globals): containers by length, tensors
by the autograd graph behind them or their element count. What grew between the two looks keeps the
leak; the statements of the user's code that add to it by that name are the keeping lines.
"""

from __future__ import annotations

import ast
import collections
import linecache
import sys
import time
import types

import torch

from gputui.model import LeakKeeper
from gputui.model.probe import KEEPER_GRAPH
from gputui.probe.sites import is_user_file

MAX_FRAMES = 4  # user frames looked at, innermost first
MAX_STACK = 100  # frames walked up to find them, a framework's (Lightning's, a Trainer's) included
MAX_NAMES = 5000  # names sized per look (a bound on memory; LOOK_SECONDS bounds the time)
MAX_GRAPH = 20_000  # autograd nodes walked per tensor
LOOK_SECONDS = 0.05  # one look stops here, with what it found so far (it runs on the training thread)
# nn.Module's own bookkeeping (submodules, parameters, buffers, hooks): the user's lists, dicts and caches
# on a model are its other attributes.
_MODULE_OWN = frozenset(vars(torch.nn.Module()))
_CONTAINERS = (list, dict, set, collections.deque, tuple)
_ADDERS = {"append", "extend", "insert", "add", "update", "setdefault", "appendleft", "extendleft"}


def graph_size(tensor: torch.Tensor) -> int:
    """Autograd nodes reachable from the tensor's grad_fn (bounded)."""
    root = tensor.grad_fn
    if root is None:
        return 0
    seen, todo = {root}, [root]
    while todo and len(seen) < MAX_GRAPH:
        for nxt, _ in todo.pop().next_functions:
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return len(seen)


def size_of(value) -> tuple[str, int] | None:
    """(what it is, how big) for what can hold a leak; None for anything else."""
    if isinstance(value, torch.Tensor):
        if value.grad_fn is not None:
            return KEEPER_GRAPH, graph_size(value)
        return "a tensor", value.numel()
    if isinstance(value, _CONTAINERS) and not isinstance(value, (str, bytes)):
        return f"a {type(value).__name__}", len(value)
    return None


def _holds_attributes(value) -> bool:
    """An object of the user's (a trainer, a logger, a LightningModule, a model) whose attributes may
    hold a leak."""
    if isinstance(value, (torch.Tensor, torch.optim.Optimizer, types.ModuleType, type,
                          types.FunctionType, types.MethodType, *_CONTAINERS)):
        return False
    module = getattr(type(value), "__module__", "") or ""
    # (gputui's own classes are not the user's, but for the demo loop's, which sites.is_user_file
    # counts as the user's code.)
    return hasattr(value, "__dict__") and (
        not module.startswith(("torch", "gputui", "builtins")) or _class_file(value) is not None)


def _class_file(value) -> str | None:
    """The user's file that defines the value's class (where its attributes are added to), if any."""
    module = sys.modules.get(getattr(type(value), "__module__", "") or "")
    filename = getattr(module, "__file__", None)
    return filename if filename and is_user_file(filename) else None


def look(frame=None, clock=time.perf_counter, seconds: float = LOOK_SECONDS) -> dict[tuple, tuple]:
    """Sizes of what the user's frames on the stack can reach by name, within ``seconds``.

    Keyed by (file, function's first line, scope, name); scope is "local", "attribute" or "global".
    Values: (what, size, function name, the holder's id).
    """
    frame = frame or sys._getframe(1)
    deadline = clock() + seconds
    found: dict[tuple, tuple] = {}
    frames = walked = 0
    while frame is not None and frames < MAX_FRAMES and walked < MAX_STACK and len(found) < MAX_NAMES:
        code = frame.f_code
        user = is_user_file(code.co_filename)
        frames += user
        walked += 1
        place = (code.co_filename, code.co_firstlineno)
        for name, value in list(frame.f_locals.items()):
            if user:
                _note(found, place, "local", name, value, code.co_name)
            # A framework's loop (Lightning's, a Trainer's) holds the user's objects too: its `model`
            # is the user's LightningModule, its `self` the user's Trainer subclass.
            if _holds_attributes(value) and (user or _class_file(value) is not None):
                # Its attributes are added to in the methods of its class, wherever that lives; there
                # the user calls it `self`, whatever a framework calls it.
                home = (_class_file(value) or code.co_filename, 0)
                holder = name if user else "self"
                for attr, inner in _attributes(value):
                    _note(found, home, "attribute", f"{holder}.{attr}", inner, code.co_name)
                    if clock() > deadline or len(found) >= MAX_NAMES:
                        return found
        if user:
            for name, value in list(frame.f_globals.items())[:200]:
                if not name.startswith("__"):
                    _note(found, place, "global", name, value, code.co_name)
        if clock() > deadline:
            break
        frame = frame.f_back
    return found


def _attributes(value) -> list[tuple[str, object]]:
    """All of an object's own attributes (a Trainer has dozens before the user's); a module's but for
    nn.Module's bookkeeping."""
    attributes = list(vars(value).items())
    if isinstance(value, torch.nn.Module):
        return [(name, inner) for name, inner in attributes if name not in _MODULE_OWN]
    return attributes


def _note(found, place, scope, name, value, function) -> None:
    sized = size_of(value)
    if sized is not None:
        found[tuple(place) + (scope, name)] = (sized[0], sized[1], function, id(value))


def growing(before: dict, after: dict, steps: int) -> list[tuple[tuple, str, float]]:
    """(key, what, growth per step) of the holders that grew between two looks, fastest first."""
    grown = []
    for key, (what, size, _function, _id) in after.items():
        earlier = before.get(key)
        if earlier is None or size <= earlier[1] or steps <= 0:
            continue
        grown.append((key, what, (size - earlier[1]) / steps))
    return sorted(grown, key=lambda g: -g[2])


def keeping_lines(filename: str, first_line: int, scope: str, name: str) -> list[int]:
    """Lines of the user's code that add to ``name``: in the function (locals), in every method of
    the file that adds to an attribute of that name, or anywhere in the module (globals)."""
    source = "".join(linecache.getlines(filename))
    if not source:
        return []
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    if scope == "local":
        scopes: list[ast.AST] = [
            n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (n.decorator_list[0].lineno if n.decorator_list else n.lineno) <= first_line <= n.lineno]
        if not scopes:
            scopes = [tree]  # not inside a function: the module's own statements
        matches = _adds_to(scopes[0], lambda node: isinstance(node, ast.Name) and node.id == name)
    elif scope == "attribute":
        attr = name.rsplit(".", 1)[-1]
        matches = _adds_to(tree, lambda node: isinstance(node, ast.Attribute) and node.attr == attr)
    else:
        matches = _adds_to(tree, lambda node: isinstance(node, ast.Name) and node.id == name)
    return sorted(set(matches))


def _adds_to(tree, is_holder) -> list[int]:
    """Statements that make the holder bigger: x.append(...), x[k] = v, x += v, x = f(x, ...)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _ADDERS \
                and is_holder(node.func.value):
            lines.append(node.lineno)
        elif isinstance(node, ast.AugAssign) and is_holder(node.target):
            lines.append(node.lineno)
        elif isinstance(node, ast.Assign):
            targets = [t for target in node.targets for t in
                       (target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target])]
            if any(isinstance(t, ast.Subscript) and is_holder(t.value) for t in targets):
                lines.append(node.lineno)
            elif any(is_holder(t) for t in targets) and any(is_holder(n) for n in ast.walk(node.value)):
                lines.append(node.lineno)  # x = torch.cat([x, y]); out, hidden = model(x, hidden)
    return lines


class KeeperFinder:
    """Two looks ``span`` steps apart, on the training thread; the keepers found stay readable."""

    def __init__(self, problems):
        self.problems = problems
        self.keepers: tuple[LeakKeeper, ...] = ()
        self._first: tuple[int, dict] | None = None
        self._due = 0  # the step of the second look

    def start(self, step: int, frame=None, span: int = 1) -> None:
        """The first look, at step ``step``; the second is due ``span`` steps later (at least one): whole
        periods of a leak that grows in steps, so that its keeper has grown and its rate is right."""
        try:
            self._first = (step, look(frame or sys._getframe(1)))
            self._due = step + max(1, span)
        except Exception as exc:
            self.problems.record("finding the keeping line", exc)
            self._first = None

    @property
    def looking(self) -> bool:
        return self._first is not None

    def due(self, step: int) -> bool:
        """Whether the second look is due at step ``step``."""
        return self._first is not None and step >= self._due

    def finish(self, step: int, frame=None) -> None:
        first, self._first = self._first, None
        if first is None:
            return
        try:
            after = look(frame or sys._getframe(1))
            found: dict[tuple, LeakKeeper] = {}
            for key, what, per_step in growing(first[1], after, step - first[0]):
                filename, first_line, scope, name = key
                lines = keeping_lines(filename, first_line, scope, name)
                function = after[key][2]
                where = tuple(f"{filename}:{line} in {_function_at(filename, line) or function}" for line in lines[:3])
                # One holder kept at the same lines is one keeper, however it was reached: a module's
                # globals are also its top-level frame's locals, a trainer's `self` is its caller's `trainer`.
                found.setdefault((after[key][3], where), LeakKeeper(
                    name=name, scope=scope, what=what, size=after[key][1], per_step=per_step, where=where))
                if len(found) == 3:
                    break
            self.keepers = tuple(found.values())
        except Exception as exc:
            self.problems.record("finding the keeping line", exc)


def _function_at(filename: str, line: int) -> str | None:
    """The name of the innermost function holding ``line``, for a readable place."""
    try:
        tree = ast.parse("".join(linecache.getlines(filename)))
    except SyntaxError:
        return None
    best = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                node.lineno <= line <= (node.end_lineno or node.lineno):
            if best is None or node.lineno > best.lineno:
                best = node
    return best.name if best is not None else "<module>"
