"""The catalogue of valid MIG layouts of a GPU model: every combination of its profiles at the
placements the driver (or the GPU catalogue) allows, and the text forms operators type."""

from __future__ import annotations

from console.gpucatalog import GpuModel, MigProfile, MigSpec

Instance = tuple[str, int]  # (profile name, placement start)


class MigError(Exception):
    """A re-layout cannot go ahead, or failed; the message is one sentence."""


def _base(name: str) -> str:
    return name.split("+")[0].split("-")[0]


def _fits(
    layout: list[Instance],
    p: MigProfile,
    start: int,
    profiles: dict[str, MigProfile],
    max_instances: int,
) -> bool:
    if start not in p.starts or len(layout) >= max_instances:
        return False
    if sum(1 for n, _ in layout if n == p.name) >= p.max:
        return False
    if "+me" in p.name and any("+me" in n for n, _ in layout):
        return False
    lo, hi = start, start + p.size
    return all(not (lo < s + profiles[n].size and s < hi) for n, s in layout)


def _spec(model: GpuModel | MigSpec) -> MigSpec:
    spec = model.mig if isinstance(model, GpuModel) else model
    if spec is None:
        raise MigError(f"{model.name if isinstance(model, GpuModel) else 'this GPU'} has no MIG.")
    return spec


def valid_layouts(model: GpuModel | MigSpec) -> list[list[Instance]]:
    """Every maximal layout of the plain profiles, then the same layouts with each size class
    switched, as a whole, to one attribute variant (+gfx, -me, +me.all, +me) within its counts."""
    spec = _spec(model)
    profiles = {p.name: p for p in spec.profiles}
    plain = [p for p in spec.profiles if "+" not in p.name and "-" not in p.name]
    grid = max(s + p.size for p in spec.profiles for s in p.starts)
    found: set[tuple[Instance, ...]] = set()

    def search(pos: int, layout: list[Instance]) -> None:
        if pos >= grid:
            found.add(tuple(sorted(layout, key=lambda x: (x[1], x[0]))))
            return
        for p in plain:
            if _fits(layout, p, pos, profiles, spec.max_instances):
                search(pos + p.size, layout + [(p.name, pos)])
        search(pos + 1, layout)

    search(0, [])

    def maximal(layout: tuple[Instance, ...]) -> bool:
        return not any(
            _fits(list(layout), p, s, profiles, spec.max_instances) for p in plain for s in p.starts
        )

    base = sorted(
        (list(x) for x in found if x and maximal(x)),
        key=lambda L: (-max(profiles[n].slices for n, _ in L), len(L), L),
    )
    out = [list(b) for b in base]
    seen = {tuple(b) for b in base}
    for layout in base:
        for variant in spec.profiles:
            if variant.name in (p.name for p in plain):
                continue
            base_name = _base(variant.name)
            if not any(n == base_name for n, _ in layout):
                continue
            if variant.name.endswith("+me") or variant.name.endswith("+me.all"):
                # one instance owns the media engines: swap only the first of that size
                idx = next(i for i, (n, _) in enumerate(layout) if n == base_name)
                cand = list(layout)
                cand[idx] = (variant.name, cand[idx][1])
            else:
                cand = [(variant.name if n == base_name else n, s) for n, s in layout]
            if sum(1 for n, _ in cand if n == variant.name) > variant.max:
                continue
            key = tuple(sorted(cand, key=lambda x: (x[1], x[0])))
            if key not in seen:
                seen.add(key)
                out.append(list(key))
    return out


def describe(layout: list[Instance]) -> str:
    """'2g.48gb + 1g.24gb x2' (counts, largest first)."""
    if not layout:
        return "no instances"
    counts: dict[str, int] = {}
    for n, _ in layout:
        counts[n] = counts.get(n, 0) + 1
    parts = sorted(counts.items(), key=lambda kv: (-int(kv[0].split("g.")[0]), kv[0]))
    return " + ".join(n if c == 1 else f"{n} x{c}" for n, c in parts)


def placements(layout: list[Instance]) -> str:
    return ",".join(f"{n}@{s}" for n, s in sorted(layout, key=lambda x: x[1]))


def layout_text(layout: list[Instance] | str) -> str:
    """A layout as ``mig apply`` takes it back: placements, "none" (MIG on, no instances), or the
    mode word."""
    return layout if isinstance(layout, str) else placements(layout) or "none"


def parse_layout(text: str, model: GpuModel | MigSpec) -> list[Instance] | str:
    """'2g.48gb@0,1g.24gb@6,1g.24gb@9' (explicit), '2g.48gb+1g.24gb*2' (counts: the catalogue's first
    layout with them), 'none' (MIG on, no instances), or 'disable' / 'enable'. Returns the layout, or the mode word."""
    t = text.strip().lower()
    if t in ("disable", "enable"):
        return t
    if t == "none":
        return []
    layouts = valid_layouts(model)
    if "@" in t:
        inst = []
        for part in t.split(","):
            name, _, start = part.strip().partition("@")
            if not start.isdigit():
                raise MigError(f"{part!r}: give each instance as profile@start, e.g. 1g.24gb@6.")
            inst.append((name, int(start)))
        key = sorted(inst, key=lambda x: (x[1], x[0]))
        if key not in [
            sorted(L, key=lambda x: (x[1], x[0])) for L in layouts
        ] and not _valid_partial(key, model):
            raise MigError(
                f"{text!r} is not a valid layout for this GPU; see `inferdeck mig layouts`."
            )
        return key
    want: dict[str, int] = {}
    for part in t.replace(" ", "").split("+"):
        name, _, count = part.partition("*")
        name = name.removesuffix("x")
        want[name] = want.get(name, 0) + (int(count) if count.isdigit() else 1)
    for L in layouts:
        got: dict[str, int] = {}
        for n, _ in L:
            got[n] = got.get(n, 0) + 1
        if got == want:
            return L
    raise MigError(f"{text!r} is not a valid layout for this GPU; see `inferdeck mig layouts`.")


def _valid_partial(layout: list[Instance], model: GpuModel | MigSpec) -> bool:
    spec = _spec(model)
    profiles = {p.name: p for p in spec.profiles}
    acc: list[Instance] = []
    for n, s in layout:
        p = profiles.get(n)
        if p is None or not _fits(acc, p, s, profiles, spec.max_instances):
            return False
        acc.append((n, s))
    return True


def diff(
    current: list[Instance], target: list[Instance]
) -> tuple[list[Instance], list[Instance], list[Instance]]:
    """(keep, destroy, create)."""
    cur, tgt = set(current), set(target)
    return (
        sorted(cur & tgt, key=lambda x: x[1]),
        sorted(cur - tgt, key=lambda x: x[1]),
        sorted(tgt - cur, key=lambda x: x[1]),
    )
