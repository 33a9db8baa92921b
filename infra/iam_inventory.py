"""IAM proven from the code: what each Lambda function can call on AWS, against its role.

  iam_inventory.py check TEMPLATE     every needed action granted, nothing granted unused
  iam_inventory.py show               the inventory: function -> action -> call sites
  iam_inventory.py selftest TEMPLATE WORKDIR
                                      removing a grant, or granting one too many, fails `check`

How the inventory is derived (no hand list of operations):

1. `cargo metadata` gives the workspace crates, each function crate's dependency closure
   (normal dependencies only: no dev- or build-dependencies) and the AWS SDK crates in use.
   An SDK's operations are the modules under its `src/operation/` (`batch_get_item`, ...).
2. Every Rust function in the closure's `src/` (test modules stripped) is parsed for the calls
   it makes. A call `.batch_get_item()` on a client, in a crate that depends on that SDK, is an
   AWS operation at that source line.
3. From the function's `main` (and its own crate), calls are followed by name: `foo(` to free
   functions named foo, `module::foo(` to foo in a file or directory of that module,
   `Type::foo(` / `Self::foo(` / `self.foo(` to foo of that impl (or trait), `x.foo(` to foo of
   x's declared type when the field, parameter or `let` declares it (`dyn Store`: every
   implementation), else to every method named foo; a type of another crate is not followed
   (`next.run(req)` is axum's). A candidate must take as many arguments as the call passes and
   be visible (`pub`, or in the caller's crate) and, unless it implements a trait, in a crate
   the caller's crate depends on (`tx.execute(` in the SQLite store is not the runner's
   `execute`; `keys.unwrap(` on a `dyn KeyWrap` reaches every impl); functions passed by name (`.map(Self::foo)`)
   count as calls; `#[cfg(test)]` modules are skipped. Where it cannot tell, it follows more
   paths, not fewer; what it cannot see at all: calls hidden in macros, and generic
   parameters with longer names than `T`/`S2` taken for another crate's type.
4. Operations map to IAM actions as AWS documents them (TransactWriteItems is authorised per
   item by PutItem/UpdateItem/DeleteItem/ConditionCheckItem; SendMessageBatch by SendMessage;
   ...). The runner's event source mapping polls its queue with the runner's role, so the
   runner also needs what Lambda's SQS poller calls.
5. The role's statements in the template are compared both ways: a needed action not granted
   fails (naming the function, the operation and the source file); a granted action no code
   path needs fails too. Logs actions (the Lambda runtime writes the log group) are outside
   this check (infra/checks.py checks their resource).
6. Table writes are tenant-scoped: every DynamoDB write a function's role grants sits in a
   statement confined by `dynamodb:LeadingKeys` to tenant items (`T#*`), and no code path of
   a function writes an API key's `KEY#` lookup item (a function that builds `lookup_pk(` and
   writes): only the operator's `agentlane keys` does, with the operator's credentials.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# Lambda function resource in the template -> its crate (the binary's package).
# IngressStreamFunction runs the ingress binary too, in streaming mode, where it serves only the
# routes of `agentlane_api::streaming_app` (reads, and the OpenAI-compatible routes' accepted
# turns): its role is checked by infra/checks.py (`check_stream_role`) instead, since this
# name-based inventory cannot tell the two modes' routers apart (it would grant the streaming
# role every write of the HTTP API).
FUNCTIONS = {
    "IngressFunction": "agentlane-ingress",
    "RunnerFunction": "agentlane-runner",
    "CronFunction": "agentlane-cron",
}

# IAM service prefix per SDK crate.
SDK_PREFIX = {
    "aws-sdk-dynamodb": "dynamodb",
    "aws-sdk-sqs": "sqs",
    "aws-sdk-secretsmanager": "secretsmanager",
    "aws-sdk-ssm": "ssm",
    "aws-sdk-cloudwatch": "cloudwatch",
    "aws-sdk-s3": "s3",
    "aws-sdk-kms": "kms",
}

# Operations whose IAM authorisation is not the action of the same name (AWS Service
# Authorization Reference: DynamoDB and SQS).
ACTIONS_OF = {
    # Authorised per item: the item kinds are found where the transaction's items are built
    # (TRANSACT_ITEMS below), so that a function is granted only the kinds its paths write.
    ("dynamodb", "transact_write_items"): [],
    ("dynamodb", "transact_get_items"): ["dynamodb:GetItem"],
    ("dynamodb", "batch_write_item"): ["dynamodb:BatchWriteItem"],
    ("dynamodb", "execute_transaction"): ["dynamodb:PartiQLInsert", "dynamodb:PartiQLUpdate"],
    ("sqs", "send_message_batch"): ["sqs:SendMessage"],
    ("sqs", "delete_message_batch"): ["sqs:DeleteMessage"],
    ("sqs", "change_message_visibility_batch"): ["sqs:ChangeMessageVisibility"],
}

# `TransactWriteItem::builder().put(...)` and its kin: the IAM action each item kind needs.
TRANSACT_ITEMS = {
    "put": "dynamodb:PutItem",
    "update": "dynamodb:UpdateItem",
    "delete": "dynamodb:DeleteItem",
    "condition_check": "dynamodb:ConditionCheckItem",
}

# What a function's role needs beyond its own code: Lambda's SQS poller (event source
# mapping) uses the function's role to read the queue.
PLATFORM_NEEDS = {
    "RunnerFunction": {
        "sqs:ReceiveMessage": "the SQS event source mapping polls the turn queue",
        "sqs:DeleteMessage": "the SQS event source mapping deletes processed records",
        "sqs:GetQueueAttributes": "the SQS event source mapping reads the queue's attributes",
    }
}

# Outside this check: the runtime's log writes (checks.py pins their resource).
IGNORED_PREFIXES = ("logs:",)

RUST_KEYWORDS = {
    "if", "while", "for", "match", "loop", "return", "fn", "let", "move", "async", "await",
    "in", "as", "mut", "ref", "where", "impl", "dyn", "unsafe", "else", "Some", "Ok", "Err",
    "None", "Box", "Arc", "Vec", "String", "self", "Self", "super", "crate",
}


def action_of(prefix: str, op: str) -> list[str]:
    if (prefix, op) in ACTIONS_OF:
        return ACTIONS_OF[(prefix, op)]
    return [prefix + ":" + "".join(w.capitalize() for w in op.split("_"))]


# ----------------------------------------------------------------------------- cargo


def metadata() -> dict[str, Any]:
    # Offline first (CI has fetched the crates); online only if something is missing.
    for flags in (["--offline"], []):
        out = subprocess.run(
            ["cargo", "metadata", "--format-version", "1", *flags],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        if out.returncode == 0:
            return json.loads(out.stdout)
    raise SystemExit(f"cargo metadata failed: {out.stderr.strip()}")


@dataclass
class Workspace:
    crates: dict[str, Path]  # workspace package name -> its directory
    deps: dict[str, set[str]]  # package name -> names of its normal dependencies (all packages)
    sdk_ops: dict[str, dict[str, str]]  # sdk crate -> {operation module: iam prefix}

    def closure(self, crate: str) -> list[str]:
        seen, todo = set(), [crate]
        while todo:
            c = todo.pop()
            if c in seen:
                continue
            seen.add(c)
            todo.extend(d for d in self.deps.get(c, ()) if d in self.crates)
        return sorted(seen)


def workspace() -> Workspace:
    meta = metadata()
    members = set(meta["workspace_members"])
    by_id = {p["id"]: p for p in meta["packages"]}
    crates = {by_id[m]["name"]: Path(by_id[m]["manifest_path"]).parent for m in members}
    deps: dict[str, set[str]] = {}
    # The resolved graph: only dependencies actually enabled (features), normal kind only.
    for node in meta["resolve"]["nodes"]:
        name = by_id[node["id"]]["name"]
        normal = {
            by_id[d["pkg"]]["name"]
            for d in node.get("deps", [])
            if any(k.get("kind") in (None, "normal") for k in d.get("dep_kinds", []))
        }
        deps[name] = normal
    sdk_ops: dict[str, dict[str, str]] = {}
    for pkg in meta["packages"]:
        if pkg["name"].startswith("aws-sdk-"):
            prefix = SDK_PREFIX.get(pkg["name"], pkg["name"].removeprefix("aws-sdk-"))
            op_dir = Path(pkg["manifest_path"]).parent / "src" / "operation"
            if op_dir.is_dir():
                ops = {p.name for p in op_dir.iterdir() if p.is_dir()}
                sdk_ops[pkg["name"]] = {op: prefix for op in ops}
    return Workspace(crates, deps, sdk_ops)


# ----------------------------------------------------------------------------- Rust parsing


def strip_comments_and_strings(text: str) -> str:
    """Comments and string contents blanked (same length, newlines kept) so braces match."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r(#*)"', text[i:]) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'r(#*)"', text[i:])
            assert m
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append('"' + re.sub(r"[^\n]", " ", text[i + 1 : j - 1]) + '"')
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('"' + re.sub(r"[^\n]", " ", text[i + 1 : j]) + '"')
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:]):
            m = re.match(r"'(\\.|[^\\'])'", text[i:])
            assert m
            out.append("' '" + " " * (len(m.group(0)) - 3))
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching_brace(text: str, open_at: int) -> int:
    depth = 0
    for j in range(open_at, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


def strip_test_modules(text: str) -> str:
    """`#[cfg(test)] mod x { ... }` (and `#[cfg(test)] mod x;`) removed: tests are not deployed."""
    while True:
        m = re.search(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", text)
        if not m:
            return text
        end = matching_brace(text, m.end() - 1)
        text = text[: m.start()] + re.sub(r"[^\n]", " ", text[m.start() : end + 1]) + text[end + 1 :]


@dataclass
class RustFn:
    crate: str
    file: Path
    line: int
    name: str
    owner: str | None  # the impl's type (or trait) name, None for a free function
    trait: str | None
    body: str
    body_line: int
    public: bool  # callable from other crates (pub, or a trait's method)
    signature: str = ""

    def arity(self, method_call: bool) -> int:
        """Arguments a call passes: without `self` for `x.foo(`, with it for `Type::foo(x, ..)`."""
        depth, end = 1, len(self.signature)
        for j, ch in enumerate(self.signature):
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if depth == 0:
                end = j
                break
        params = split_top(self.signature[:end].replace("->", "  "))
        has_self = bool(params) and re.match(r"^\s*(&\s*('\w+\s*)?)?(mut\s+)?self\b", params[0]) is not None
        return len(params) - (1 if has_self and method_call else 0)


FN_RE = re.compile(r"\bfn\s+([a-z_][a-z0-9_]*)\s*(<[^{;]*?>)?\s*\(")
IMPL_RE = re.compile(r"\bimpl\b\s*(<[^{]*?>)?\s*([^{;]+?)\s*\{")


def impl_spans(text: str) -> list[tuple[int, int, str, str | None]]:
    """(start, end, type name, trait name) of every impl block."""
    spans = []
    for m in IMPL_RE.finditer(text):
        head = m.group(2)
        trait = None
        if " for " in f" {head} ":
            trait_part, _, ty = head.partition(" for ")
            trait = re.sub(r"<.*", "", trait_part).strip().split("::")[-1]
        else:
            ty = head
        ty = re.sub(r"\bwhere\b.*", "", ty)
        ty = re.sub(r"<.*", "", ty).strip().split("::")[-1].lstrip("&").strip()
        spans.append((m.end() - 1, matching_brace(text, m.end() - 1), ty, trait))
    for m in re.finditer(r"\btrait\s+([A-Z]\w*)[^{;]*\{", text):
        # A trait's default methods: owned by the trait.
        spans.append((m.end() - 1, matching_brace(text, m.end() - 1), m.group(1), m.group(1)))
    return spans


def parse_file(crate: str, path: Path) -> list[RustFn]:
    raw = path.read_text()
    text = strip_test_modules(strip_comments_and_strings(raw))
    impls = impl_spans(text)
    fns = []
    for m in FN_RE.finditer(text):
        # The body: the first `{` after the signature, unless a `;` comes first (trait decl).
        i = m.end()
        depth = 1
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        brace, semi = text.find("{", i), text.find(";", i)
        if brace < 0 or (0 <= semi < brace):
            continue
        end = matching_brace(text, brace)
        owner = trait = None
        for start, stop, ty, tr in impls:
            if start < m.start() < stop:
                owner, trait = ty, tr
        head = text[max(0, m.start() - 40) : m.start()]
        public = trait is not None or (owner is not None and owner == trait) or bool(
            re.search(r"\bpub\s+((const|async|unsafe|extern\s+\S+)\s+)*$", head)
        )
        fns.append(
            RustFn(
                crate,
                path,
                text.count("\n", 0, m.start()) + 1,
                m.group(1),
                owner,
                trait,
                text[brace : end + 1],
                text.count("\n", 0, brace) + 1,
                public,
                text[m.end() : brace],
            )
        )
    return fns


def split_top(text: str) -> list[str]:
    """Comma-separated items at nesting depth 0 (empty items dropped)."""
    items, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        if ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    items.append("".join(cur))
    return [i for i in items if i.strip()]


def call_arity(body: str, open_paren: int) -> int:
    depth = 0
    for j in range(open_paren, len(body)):
        if body[j] in "([{":
            depth += 1
        elif body[j] in ")]}":
            depth -= 1
            if depth == 0:
                inner = body[open_paren + 1 : j]
                # Nesting counted on ()[]{} only: `a < b` would confuse <> tracking.
                items, d, cur = [], 0, 0
                for ch in inner:
                    if ch in "([{":
                        d += 1
                    elif ch in ")]}":
                        d -= 1
                    if ch == "," and d == 0:
                        items.append(cur)
                        cur = 0
                    else:
                        cur += 0 if ch.isspace() else 1
                items.append(cur)
                return len([n for n in items if n])
    return 0


def receiver_is_self(body: str, dot_at: int) -> bool:
    return re.search(r"\bself\s*$", body[max(0, dot_at - 12) : dot_at]) is not None


# Generic wrappers skipped when reading a receiver's declared type (`Arc<dyn Store>` -> Store).
WRAPPERS = {"Arc", "Box", "Rc", "Option", "Mutex", "RwLock", "RefCell", "Cell", "Pin", "Weak", "Send", "Sync"}


CALL_RE = re.compile(r"(?:(\b[A-Za-z_][A-Za-z0-9_]*)\s*::\s*|(\.)\s*)?\b([a-z_][a-z0-9_]*)\s*(?:::\s*<[^()]*?>\s*)?(\()?")


@dataclass
class Site:
    action: str
    op: str
    file: Path
    line: int
    fn: str


@dataclass
class Program:
    ws: Workspace
    fns: list[RustFn] = field(default_factory=list)
    by_name: dict[str, list[int]] = field(default_factory=dict)
    types: set[str] = field(default_factory=set)
    traits: set[str] = field(default_factory=set)
    fields: dict[tuple[str, str], str] = field(default_factory=dict)  # (struct, field) -> type
    closures: dict[str, set[str]] = field(default_factory=dict)  # crate -> what it depends on

    @classmethod
    def load(cls, ws: Workspace, crates: list[str]) -> "Program":
        prog = cls(ws)
        for crate in crates:
            files = sorted((ws.crates[crate] / "src").rglob("*.rs"))
            test_only = set()
            for path in files:
                # `#[cfg(test)] mod name;`: name.rs / name/ next to the declaring file
                # (mod.rs, lib.rs, main.rs declare into their own directory).
                base = path.parent if path.stem in ("mod", "lib", "main") else path.parent / path.stem
                for name in re.findall(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", path.read_text()):
                    test_only.update({base / f"{name}.rs", base / name})
            for path in files:
                if any(t == path or t in path.parents for t in test_only):
                    continue
                prog.fns.extend(parse_file(crate, path))
        for i, f in enumerate(prog.fns):
            prog.by_name.setdefault(f.name, []).append(i)
            if f.owner:
                prog.types.add(f.owner)
            if f.trait:
                prog.types.add(f.trait)
        for c in crates:
            for p in (ws.crates[c] / "src").rglob("*.rs"):
                text = strip_comments_and_strings(p.read_text())
                for sm in re.finditer(r"\bstruct\s+([A-Z]\w*)[^{;(]*\{", text):
                    body = text[sm.end() : matching_brace(text, sm.end() - 1)]
                    for fm in re.finditer(r"(?:^|,|\n)\s*(?:pub(?:\([^)]*\))?\s+)?([a-z_]\w*)\s*:\s*([^\n]+)", body):
                        prog.fields[(sm.group(1), fm.group(1))] = fm.group(2)
        prog.traits = {t for c in crates for p in (ws.crates[c] / "src").rglob("*.rs")
                       for t in re.findall(r"\btrait\s+([A-Z]\w*)", p.read_text())}
        return prog

    def depends_on(self, crate: str) -> set[str]:
        """The crate and the workspace crates it depends on, transitively (normal deps)."""
        if crate not in self.closures:
            self.closures[crate] = set(self.ws.closure(crate))
        return self.closures[crate]

    def sdk_ops_for(self, crate: str) -> dict[str, str]:
        ops: dict[str, str] = {}
        for dep in self.ws.deps.get(crate, ()):
            ops.update(self.ws.sdk_ops.get(dep, {}))
        return ops

    def callees(self, f: RustFn) -> set[int]:
        out: set[int] = set()
        for m in CALL_RE.finditer(f.body):
            qual, dot, name, paren = m.group(1), m.group(2), m.group(3), m.group(4)
            cands = self.by_name.get(name)
            if not cands or name in RUST_KEYWORDS:
                continue
            argc = call_arity(f.body, m.end() - 1) if paren else None
            for i in cands:
                g = self.fns[i]
                if g.crate != f.crate and not g.public:
                    continue  # private to its crate
                if g.trait is None and g.crate not in self.depends_on(f.crate):
                    # A free function or an inherent method is only callable from crates that
                    # depend on its own (`tx.execute(` in the SQLite store is not the runner's
                    # `execute`); a trait impl may be anywhere (dyn dispatch, `dyn KeyWrap`).
                    continue
                if argc is not None and argc != g.arity(dot is not None and qual is None):
                    continue  # another function of that name: it takes a different number of arguments
                if qual:
                    if qual in ("Self", "self"):
                        ok = g.owner == f.owner or g.trait == f.trait
                    elif qual[0].isupper():
                        # Type::foo / Trait::foo; an unknown (foreign) type: not ours.
                        ok = qual in self.types and (g.owner == qual or g.trait == qual)
                    else:
                        # module::foo: a workspace free function of that name.
                        ok = g.owner is None and (
                            qual in ("crate", "super")
                            or qual in g.file.parts
                            or qual == g.file.stem
                            or qual == g.crate.replace("-", "_")
                        )
                elif dot and receiver_is_self(f.body, m.start()):
                    # self.foo(: a method of the same impl, or of a trait (default methods).
                    ok = paren is not None and (g.owner == f.owner or g.owner in self.traits)
                elif dot:
                    ty = self.receiver_type(f, m.start())
                    if ty is not None and re.fullmatch(r"[A-Z][A-Z0-9]?", ty):
                        ty = None  # a generic parameter (`store: &S`): any method of that name
                    if ty is None:
                        ok = g.owner is not None and paren is not None
                    elif ty in self.traits:
                        ok = paren is not None and g.trait is not None  # dyn Trait: any impl
                    elif ty in self.types:
                        ok = paren is not None and (g.owner == ty or g.owner in self.traits)
                    else:
                        ok = False  # a method of another crate's type
                else:
                    # foo( or foo passed by name: a free function.
                    ok = g.owner is None
                if ok:
                    out.add(i)
        return out

    def receiver_type(self, f: RustFn, dot_at: int) -> str | None:
        """The type of `x` in `x.foo(` / `self.x.foo(` when declared nearby, else None."""
        before = f.body[max(0, dot_at - 60) : dot_at]
        m = re.search(r"(\bself\s*\.\s*)?\b([a-z_][a-z0-9_]*)\s*$", before)
        if not m:
            return None
        ident = m.group(2)
        if m.group(1):
            decl = self.fields.get((f.owner, ident))
        else:
            found = re.search(rf"\b{ident}\s*:\s*([^,)=;{{]+)", f.signature) or re.search(
                rf"\blet\s+(?:mut\s+)?{ident}\s*:\s*([^=;]+)", f.body[:dot_at]
            )
            decl = found.group(1) if found else None
        if not decl:
            return None
        names = [n for n in re.findall(r"\b([A-Z]\w*)", decl) if n not in WRAPPERS]
        return names[-1] if names else None

    def sites(self, f: RustFn) -> list[Site]:
        ops = self.sdk_ops_for(f.crate)
        out = []
        if not ops:
            return out
        for m in re.finditer(r"\.\s*([a-z_][a-z0-9_]*)\s*\(\s*\)", f.body):
            op = m.group(1)
            if op in ops:
                line = f.body_line + f.body.count("\n", 0, m.start())
                for action in action_of(ops[op], op):
                    out.append(Site(action, op, f.file, line, f.name))
        if "transact_write_items" in ops:
            for m in re.finditer(r"\bTransactWriteItem\s*::\s*builder\s*\(\s*\)\s*\.\s*(\w+)\s*\(", f.body):
                if m.group(1) in TRANSACT_ITEMS:
                    line = f.body_line + f.body.count("\n", 0, m.start())
                    op = f"transact_write_items ({m.group(1)} item)"
                    out.append(Site(TRANSACT_ITEMS[m.group(1)], op, f.file, line, f.name))
        return out


def reachable(ws: Workspace, function_crate: str) -> tuple["Program", set[int]]:
    """The program of a function crate's closure and the functions its code can reach."""
    crates = ws.closure(function_crate)
    prog = Program.load(ws, crates)
    roots = [i for i, f in enumerate(prog.fns) if f.crate == function_crate]
    seen: set[int] = set()
    todo = list(roots)
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        todo.extend(prog.callees(prog.fns[i]) - seen)
    return prog, seen


def inventory(ws: Workspace, function_crate: str) -> dict[str, list[Site]]:
    """Needed IAM action -> the call sites that need it, for one function crate."""
    prog, seen = reachable(ws, function_crate)
    needs: dict[str, list[Site]] = {}
    for i in sorted(seen):
        for site in prog.sites(prog.fns[i]):
            needs.setdefault(site.action, []).append(site)
    return needs


# Writing an API key's lookup item (`KEY#{id}`): a function that names the lookup key and
# writes an item.
KEY_ITEM = re.compile(r"\blookup_pk\s*\(")
ITEM_WRITE = re.compile(r"\b(put_item|update_item|delete_item|TransactWriteItem)\b")


def key_item_writers(ws: Workspace, function_crate: str) -> list[str]:
    """The reachable functions of a function crate that write `KEY#` items."""
    prog, seen = reachable(ws, function_crate)
    out = []
    for i in sorted(seen):
        f = prog.fns[i]
        if KEY_ITEM.search(f.body) and ITEM_WRITE.search(f.body):
            out.append(f"fn {f.name} ({rel(f.file)}:{f.body_line})")
    return out


# DynamoDB actions that write an item, and the items a function's role may write.
TABLE_WRITES = {
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:ConditionCheckItem",
    "dynamodb:BatchWriteItem",
}
TENANT_ITEMS = ["T#*"]
# Besides tenant items a function may write the unknown-key windows per source address (the
# ingress' probe limit) and the tenant registry (`TENANTS`, put with a tenant's new session for
# the retention sweep); never a `KEY#` item.
WRITABLE_ITEMS = {"T#*", "RATE#PROBES#*", "TENANTS"}


# ----------------------------------------------------------------------------- template


def load_template(path: str) -> dict[str, Any]:
    from cfnlint.decode import decode

    template, matches = decode(path)
    if matches or template is None:
        raise SystemExit(f"cannot parse {path}: {matches}")
    return json.loads(json.dumps(template))


def granted(template: dict[str, Any], function: str) -> dict[str, str]:
    """IAM action -> statement Sid, from the inline policies of the function's role."""
    res = template["Resources"]
    role_ref = res[function]["Properties"].get("Role")
    if not (isinstance(role_ref, dict) and "Fn::GetAtt" in role_ref):
        raise SystemExit(f"{function}: its Role is not !GetAtt <role>.Arn of this template")
    att = role_ref["Fn::GetAtt"]
    role = res[att.split(".")[0] if isinstance(att, str) else att[0]]
    out = {}
    for policy in role["Properties"].get("Policies", []):
        for st in policy["PolicyDocument"]["Statement"] if isinstance(
            policy["PolicyDocument"]["Statement"], list
        ) else [policy["PolicyDocument"]["Statement"]]:
            # A conditional statement (!If [cond, statement, AWS::NoValue]) counts as granted:
            # the code may need it whenever the condition holds.
            branches = st["Fn::If"][1:] if "Fn::If" in st else [st]
            for branch in branches:
                if not isinstance(branch, dict) or "Ref" in branch:
                    continue
                actions = branch.get("Action", [])
                for a in actions if isinstance(actions, list) else [actions]:
                    out[a] = branch.get("Sid", "?")
    return out


def unscoped_writes(template: dict[str, Any], function: str) -> list[str]:
    """`Sid: action` of the table writes of the function's role not confined to tenant items."""
    res = template["Resources"]
    att = res[function]["Properties"]["Role"]["Fn::GetAtt"]
    role = res[att.split(".")[0] if isinstance(att, str) else att[0]]
    out = []
    for policy in role["Properties"].get("Policies", []):
        sts = policy["PolicyDocument"]["Statement"]
        for st in sts if isinstance(sts, list) else [sts]:
            branches = st["Fn::If"][1:] if "Fn::If" in st else [st]
            for branch in branches:
                if not isinstance(branch, dict) or "Ref" in branch:
                    continue
                actions = branch.get("Action", [])
                writes = TABLE_WRITES & set(actions if isinstance(actions, list) else [actions])
                keys = (
                    (branch.get("Condition") or {})
                    .get("ForAllValues:StringLike", {})
                    .get("dynamodb:LeadingKeys", [])
                )
                keys = keys if isinstance(keys, list) else [keys]
                if writes and not (keys and set(keys) <= WRITABLE_ITEMS):
                    out.extend(f"{branch.get('Sid', '?')}: {a} (LeadingKeys {keys})" for a in sorted(writes))
    return out


def rel(p: Path) -> str:
    try:
        return str(p.relative_to(ROOT))
    except ValueError:
        return str(p)


def check(template_path: str, ws: Workspace | None = None, quiet: bool = False) -> int:
    ws = ws or workspace()
    template = load_template(template_path)
    failures = 0
    for function, crate in FUNCTIONS.items():
        needs = inventory(ws, crate)
        platform = dict(PLATFORM_NEEDS.get(function, {}))
        if {"secretsmanager:GetSecretValue", "ssm:GetParametersByPath"} & set(needs):
            platform["kms:Decrypt"] = (
                "Secrets Manager / SSM decrypt with the caller's kms:Decrypt when the provider "
                "keys use a customer-managed key (granted only then)"
            )
        have = {a: s for a, s in granted(template, function).items() if not a.startswith(IGNORED_PREFIXES)}
        for action, sites in sorted(needs.items()):
            if action not in have:
                failures += 1
                where = ", ".join(sorted({f"{rel(s.file)}:{s.line} ({s.op} in fn {s.fn})" for s in sites}))
                print(f"  FAIL {function} ({crate}) calls {sites[0].op} -> needs {action}, not granted: {where}")
        for action, why in sorted(platform.items()):
            if action not in have:
                failures += 1
                print(f"  FAIL {function} needs {action} ({why}), not granted")
        for action, sid in sorted(have.items()):
            if action not in needs and action not in platform:
                failures += 1
                print(
                    f"  FAIL {function} is granted {action} (statement {sid}) but no code path of "
                    f"{crate} calls it: remove the grant"
                )
        for write in unscoped_writes(template, function):
            failures += 1
            print(
                f"  FAIL {function} may write beyond tenant items ({write}): confine it with "
                f"dynamodb:LeadingKeys {TENANT_ITEMS}"
            )
        for writer in key_item_writers(ws, crate):
            failures += 1
            print(
                f"  FAIL {function} ({crate}) can reach {writer}, which writes an API key's KEY# "
                "item: only the operator path may"
            )
        if not quiet:
            print(f"  {function}: {len(set(needs) | set(platform))} actions needed, {len(have)} granted")
    return 1 if failures else 0


def show() -> int:
    ws = workspace()
    for function, crate in FUNCTIONS.items():
        print(f"{function} ({crate}):")
        for action, sites in sorted(inventory(ws, crate).items()):
            where = sorted({f"{rel(s.file)}:{s.line}" for s in sites})
            print(f"  {action:32} {', '.join(where)}")
        for action, why in sorted(PLATFORM_NEEDS.get(function, {}).items()):
            print(f"  {action:32} ({why})")
    return 0


def selftest(template_path: str, workdir: str) -> int:
    """A template with one grant removed, and one with an extra grant, must both fail."""
    import contextlib
    import io

    ws = workspace()
    text = Path(template_path).read_text()
    cases = {
        "ingress without dynamodb:BatchGetItem": ("                  - dynamodb:BatchGetItem\n", ""),
        "runner without sqs:ChangeMessageVisibility": ("                  - sqs:ChangeMessageVisibility\n", ""),
        "ingress writes any item": (
            '                    dynamodb:LeadingKeys: ["T#*"]\n',
            '                    dynamodb:LeadingKeys: ["T#*", "KEY#*"]\n',
        ),
        "ingress without kms:GenerateDataKey (sealing tenant secrets)": (
            "              - Sid: SealTenantSecrets\n"
            "                Effect: Allow\n"
            "                Action: kms:GenerateDataKey\n"
            "                Resource: !GetAtt SecretsKey.Arn\n"
            "                Condition:\n"
            "                  ForAllValues:StringEquals:\n"
            "                    kms:EncryptionContextKeys: [tenant, secret]\n"
            "                  \"Null\":\n"
            "                    kms:EncryptionContextKeys: \"false\"\n",
            "",
        ),
        "cron granted kms:GenerateDataKey it never calls": (
            "              - Sid: ReconcileDeadLetters\n",
            "              - Sid: SealTenantSecrets\n"
            "                Effect: Allow\n"
            "                Action: kms:GenerateDataKey\n"
            "                Resource: !GetAtt SecretsKey.Arn\n"
            "              - Sid: ReconcileDeadLetters\n",
        ),
        "ingress granted sqs:ReceiveMessage it never calls": (
            "              - Sid: EnqueueTurns\n"
            "                Effect: Allow\n"
            "                Action: [sqs:SendMessage, sqs:GetQueueUrl]\n",
            "              - Sid: EnqueueTurns\n"
            "                Effect: Allow\n"
            "                Action: [sqs:SendMessage, sqs:GetQueueUrl, sqs:ReceiveMessage]\n",
        ),
    }
    bad = 0
    for name, (old, new) in cases.items():
        if old not in text:
            print(f"  FAIL self-test case '{name}' no longer applies to the template (update it)")
            bad += 1
            continue
        mutated = Path(workdir, "iam-mutated.yaml")
        mutated.write_text(text.replace(old, new, 1))
        with contextlib.redirect_stdout(io.StringIO()) as out:
            rc = check(str(mutated), ws, quiet=True)
        if rc == 0:
            print(f"  FAIL the IAM check accepts a template with: {name}")
            bad += 1
        else:
            print(f"  rejected ({name}): {out.getvalue().strip().splitlines()[0].strip()}")
    print(f"IAM self-test: {len(cases) - bad} of {len(cases)} broken templates rejected")
    # The KEY# writer detector sees the operator path (`agentlane keys create|revoke`), so its
    # silence on the functions means something.
    operator = key_item_writers(ws, "agentlane-cli")
    if len(operator) < 2:
        print(f"  FAIL the KEY# writer check does not see the operator's key writes: {operator}")
        bad += 1
    else:
        print(f"  the operator path writes KEY# items: {', '.join(operator)}")
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["check"] and len(argv) == 2:
        return check(argv[1])
    if argv[:1] == ["show"]:
        return show()
    if argv[:1] == ["selftest"] and len(argv) == 3:
        return selftest(argv[1], argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
