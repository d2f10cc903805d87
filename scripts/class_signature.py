"""The assembled guard class's signature, to compare before and after moving code between mixins.

    python scripts/class_signature.py dump OUT.json          (run in each tree, with PYTHONPATH on it)
    python scripts/class_signature.py compare BEFORE.json AFTER.json

For every attribute of ``qdrant_guard.guard.Guard`` (as resolved through its MRO) it records, for
a function: its code object (bytecode, constants and nested code, names, arguments, flags; not
its qualified name, which names the class it moved to), defaults and annotations, and what each
global name it reads resolves to in its module (a function by its code, a class by its qualified
name, a constant by value). ``compare`` exits 1 naming each attribute that differs; equal
signatures mean the same methods resolve and each reads the same globals.
"""
import builtins
import json
import re
import sys
import types

import qdrant_guard.guard as G


def code_sig(co):
    consts = []
    for c in co.co_consts:
        consts.append(code_sig(c) if isinstance(c, types.CodeType) else repr(c))
    return {"code": co.co_code.hex(), "consts": consts, "names": list(co.co_names),
            "varnames": list(co.co_varnames), "freevars": list(co.co_freevars), "cellvars": list(co.co_cellvars),
            "argcount": [co.co_argcount, co.co_kwonlyargcount, co.co_posonlyargcount], "flags": co.co_flags,
            "name": co.co_name}


def names_in(co, out):
    out.update(co.co_names)
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            names_in(c, out)
    return out


def obj_sig(o):
    if isinstance(o, types.FunctionType):
        return {"fn": code_sig(o.__code__), "defaults": repr(o.__defaults__), "kwdefaults": repr(o.__kwdefaults__),
                "annotations": repr(o.__annotations__)}
    if isinstance(o, type):
        return "class " + o.__qualname__
    if isinstance(o, types.ModuleType):
        return "module " + o.__name__
    if isinstance(o, (frozenset, set)):
        return type(o).__name__ + repr(sorted(map(repr, o)))
    if isinstance(o, re.Pattern):
        return f"re {o.pattern!r} {o.flags}"
    if isinstance(o, (str, int, float, bytes, tuple, bool, type(None), dict, list, types.MappingProxyType)):
        return repr(o)
    return "obj " + type(o).__qualname__ + " " + getattr(o, "__qualname__", getattr(o, "__name__", ""))


def globals_sig(f):
    res = {}
    for n in sorted(names_in(f.__code__, set()) - {"__name__"}):
        if n in f.__globals__:
            res[n] = obj_sig(f.__globals__[n]) if not isinstance(f.__globals__[n], types.FunctionType) else \
                {"fn": code_sig(f.__globals__[n].__code__)}
        elif hasattr(builtins, n):
            res[n] = "builtin"
    return res


def attr_sig(cls, name):
    for k in cls.__mro__:
        if name in vars(k):
            raw = vars(k)[name]
            break
    else:
        return "dynamic"
    kind = type(raw).__name__
    if isinstance(raw, (staticmethod, classmethod)):
        raw = raw.__func__
    if isinstance(raw, property):
        return {"kind": "property", "get": obj_sig(raw.fget), "g": globals_sig(raw.fget) if raw.fget else None}
    if isinstance(raw, types.FunctionType):
        return {"kind": kind, "sig": obj_sig(raw), "globals": globals_sig(raw)}
    return {"kind": kind, "val": obj_sig(raw)}


def dump(path):
    out = {}
    for cls in (G.Guard,):
        out[cls.__name__] = {n: attr_sig(cls, n) for n in sorted(dir(cls))
                             if n not in ("__doc__", "__module__", "__dict__", "__weakref__", "__annotations__")}
    json.dump(out, open(path, "w"), indent=0, sort_keys=True)
    print(len(out["Guard"]), "attributes")


def compare(before, after):
    a, b = json.load(open(before)), json.load(open(after))
    bad = 0
    for cls in a:
        if set(a[cls]) != set(b[cls]):
            print(cls, "names differ:", sorted(set(a[cls]) ^ set(b[cls])))
            bad += 1
        for n in sorted(set(a[cls]) & set(b[cls])):
            if a[cls][n] != b[cls][n]:
                bad += 1
                x, y = a[cls][n], b[cls][n]
                if isinstance(x, dict) and isinstance(y, dict):
                    diff = [k for k in set(x) | set(y) if x.get(k) != y.get(k)]
                    if "globals" in diff:
                        gx, gy = x["globals"], y["globals"]
                        diff = ["globals:" + g for g in set(gx) | set(gy) if gx.get(g) != gy.get(g)] + \
                            [d for d in diff if d != "globals"]
                    print(cls, n, "differs in", diff)
                else:
                    print(cls, n, "differs")
    print("compared", sum(len(v) for v in a.values()), "attributes;", bad, "differences")
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["dump"] and len(sys.argv) == 3:
        dump(sys.argv[2])
    elif sys.argv[1:2] == ["compare"] and len(sys.argv) == 4:
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)
