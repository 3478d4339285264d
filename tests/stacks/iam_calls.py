"""Static inventory of the AWS calls the deployed code makes, who makes them, and the IAM actions each requires.

Inventory: every ``.py`` under ``lambdas/`` and ``containers/trainer/`` is parsed with ``ast``. A *client
expression* is a call ``client("svc")`` / ``boto3.client("svc")`` / ``<session>.client("svc")`` whose first
argument names a botocore service, a call of a module function that returns one (``storage._s3()``), or a name or
``self.<attr>`` assigned from one. A method call on a client expression is an AWS call when its name is the
snake_case form (``botocore.xform_name``) of an operation in that service's botocore model;
``get_paginator("op")``, ``generate_presigned_url("op", ...)`` and ``pages("svc", "op", ...)`` (the adapters' paging
helper) count as operation ``op``. A call whose name is
an operation of a service the module uses, on a receiver the scan cannot resolve, is reported as *unresolved*
(the test fails on it, so a new client pattern is noticed rather than skipped). Calls made inside libraries are
encoded in ``LIBRARY_CALLS`` (Powertools' idempotency layer). The CLI in ``dualtrack/`` runs with the user's
credentials and is not scanned.

Reachability: from an entry point (a handler module's ``handler``; every trainer module) the scan follows names
to their definitions: top-level functions and classes of the same module, names bound by module-level or
function-local imports (``from lambdas.adapters import wiring`` then ``wiring.ledger`` reaches only
``wiring.ledger``). A reached class counts with all its methods, a reached module with its module-level code.
That over-approximates what a function can call at run time, never under-approximates it for code that names
what it uses.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import botocore.session
from botocore import xform_name

ROOT = Path(__file__).resolve().parents[2]
SCANNED = (ROOT / "lambdas", ROOT / "containers" / "trainer")
MODULE = "<module>"
EVERYTHING = "*"

# Calls made by libraries on the code's behalf, keyed by the name the code calls: (service, operation) pairs.
# Powertools idempotency, "IAM Permissions": GetItem, PutItem, UpdateItem and DeleteItem on the table
# (https://docs.powertools.aws.dev/lambda/python/latest/utilities/idempotency/#iam-permissions).
LIBRARY_CALLS: dict[str, tuple[tuple[str, str], ...]] = {
    "DynamoDBPersistenceLayer": (("dynamodb", "GetItem"), ("dynamodb", "PutItem"),
                                 ("dynamodb", "UpdateItem"), ("dynamodb", "DeleteItem")),
}


@dataclass(frozen=True)
class Call:
    service: str  # boto3 client name: "s3", "stepfunctions", ...
    operation: str  # botocore operation name: "PutObject", "ListObjectsV2", ...
    path: str  # repository-relative file
    line: int
    via: str  # "client", "paginator", "pages", "presign" or "library"
    keywords: frozenset[str] = frozenset()
    transact_kinds: frozenset[str] = frozenset()  # Put/Update/Delete/ConditionCheck seen in TransactItems

    @property
    def site(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    units: dict[str, list[ast.AST]] = field(default_factory=dict)  # top-level symbol (or MODULE) -> its nodes
    spans: list[tuple[int, int, str]] = field(default_factory=list)  # line range of each top-level symbol
    calls: list[Call] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)  # "file:line receiver.method" that looks like an AWS call
    resources: list[str] = field(default_factory=list)  # boto3.resource(...) sites

    def unit_of(self, line: int) -> str:
        for start, end, name in self.spans:
            if start <= line <= end:
                return name
        return MODULE


# --- botocore models -------------------------------------------------------------------------------------------

@functools.cache
def _session() -> Any:
    return botocore.session.get_session()


@functools.cache
def services() -> frozenset[str]:
    return frozenset(_session().get_available_services())


@functools.cache
def operations(service: str) -> dict[str, str]:
    """snake_case method name -> operation name, from the service's botocore model."""
    model = _session().get_service_model(service)
    return {xform_name(op): op for op in model.operation_names}


# --- module index ----------------------------------------------------------------------------------------------

def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def modules() -> dict[str, Module]:
    out: dict[str, Module] = {}
    for base in SCANNED:
        for path in sorted(base.rglob("*.py")):
            name = _module_name(path)
            tree = ast.parse(path.read_text(), filename=str(path))
            module = Module(name, path, tree)
            module.units[MODULE] = []
            for node in tree.body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    if isinstance(node, ast.ClassDef):
                        # A class is its header and body statements; each method is a unit of its own.
                        header: list[ast.AST] = [*node.bases, *node.keywords]
                        for item in node.body:
                            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                                method = f"{node.name}.{item.name}"
                                module.units[method] = [item]
                                start = min([item.lineno] + [d.lineno for d in item.decorator_list])
                                module.spans.append((start, item.end_lineno or item.lineno, method))
                                header += item.decorator_list
                            else:
                                header.append(item)
                        module.units[node.name] = header
                    else:
                        module.units[node.name] = [node]
                    start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                    module.spans.append((start, node.end_lineno or node.lineno, node.name))
                    # Decorators run when the module is imported.
                    module.units[MODULE].extend(node.decorator_list)
                else:
                    module.units[MODULE].append(node)
            out[name] = module
    for module in out.values():
        _scan_calls(module)
    return out


# --- calls -----------------------------------------------------------------------------------------------------

def _const_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _client_literal(node: ast.AST) -> str | None:
    """``client("s3")``, ``boto3.client("s3")``, ``session.client("s3")`` -> "s3"."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    named = (isinstance(func, ast.Name) and func.id == "client") or (
        isinstance(func, ast.Attribute) and func.attr == "client")
    service = _const_str(node.args[0])
    return service if named and service in services() else None


def _scan_calls(module: Module) -> None:
    rel = str(module.path.relative_to(ROOT))
    factories: dict[str, str] = {}
    # A factory returns a client literal, or what another factory returns (``return _default_s3()``).
    changed = True
    while changed:
        changed = False
        for top in module.tree.body:
            if isinstance(top, ast.FunctionDef) and top.name not in factories:
                for ret in ast.walk(top):
                    if isinstance(ret, ast.Return) and ret.value is not None:
                        service = _client_literal(ret.value)
                        if service is None and isinstance(ret.value, ast.Call) and isinstance(ret.value.func,
                                                                                             ast.Name):
                            service = factories.get(ret.value.func.id)
                        if service:
                            factories[top.name] = service
                            changed = True
                            break

    def literal_or_factory(expr: ast.AST) -> str | None:
        service = _client_literal(expr)
        if service is None and isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
            service = factories.get(expr.func.id)
        return service

    bindings: dict[str, str] = {}
    for assign in ast.walk(module.tree):
        if isinstance(assign, ast.Assign | ast.AnnAssign) and assign.value is not None:
            service = literal_or_factory(assign.value)
            targets = assign.targets if isinstance(assign, ast.Assign) else [assign.target]
            if service:
                for target in targets:
                    bindings[ast.unparse(target)] = service

    def service_of(expr: ast.AST) -> str | None:
        return literal_or_factory(expr) or bindings.get(ast.unparse(expr))

    used = set(factories.values()) | set(bindings.values())
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "resource" and ast.unparse(func.value) == "boto3":
            module.resources.append(f"{rel}:{node.lineno}")
        called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if called in LIBRARY_CALLS:
            module.calls += [Call(s, op, rel, node.lineno, "library") for s, op in LIBRARY_CALLS[called]]
            continue
        if called == "pages" and len(node.args) >= 2:  # lambdas.adapters.aws.pages("svc", "op", **params)
            service, op_name = _const_str(node.args[0]), _const_str(node.args[1])
            if service is None or op_name is None or op_name not in operations(service):
                module.unresolved.append(f"{rel}:{node.lineno} {ast.unparse(func)} (not literals)")
                continue
            keywords = frozenset(k.arg for k in node.keywords if k.arg)
            module.calls.append(Call(service, operations(service)[op_name], rel, node.lineno, "pages", keywords))
            continue
        if not isinstance(func, ast.Attribute):
            continue
        literal = _client_literal(func.value)
        if literal:
            used.add(literal)
        service = service_of(func.value)
        method = func.attr
        keywords = frozenset(k.arg for k in node.keywords if k.arg)
        if service is None:
            if any(method in operations(s) for s in used):
                module.unresolved.append(f"{rel}:{node.lineno} {ast.unparse(func)}")
            continue
        if method in ("get_paginator", "generate_presigned_url"):
            op_name = _const_str(node.args[0] if node.args else None)
            if op_name is None or op_name not in operations(service):
                module.unresolved.append(f"{rel}:{node.lineno} {ast.unparse(func)} (operation not a literal)")
                continue
            via = "paginator" if method == "get_paginator" else "presign"
            params = next((k.value for k in node.keywords if k.arg == "Params"), None)
            if isinstance(params, ast.Dict):
                keywords = frozenset(s for s in (_const_str(k) for k in params.keys) if s)
            module.calls.append(Call(service, operations(service)[op_name], rel, node.lineno, via, keywords))
        elif method in operations(service):
            module.calls.append(Call(service, operations(service)[method], rel, node.lineno, "client", keywords,
                                     _transact_kinds(node)))


def _transact_kinds(node: ast.Call) -> frozenset[str]:
    items = next((k.value for k in node.keywords if k.arg == "TransactItems"), None)
    kinds: set[str] = set()
    if isinstance(items, ast.List | ast.Tuple):
        for item in items.elts:
            if not isinstance(item, ast.Dict):
                return frozenset()
            kinds |= {s for s in (_const_str(k) for k in item.keys) if s}
    return frozenset(kinds)


def inventory() -> list[Call]:
    return [c for m in modules().values() for c in m.calls]


def unresolved() -> list[str]:
    return [u for m in modules().values() for u in m.unresolved]


def resource_uses() -> list[str]:
    return [r for m in modules().values() for r in m.resources]


# --- reachability ----------------------------------------------------------------------------------------------

def _import_bindings(nodes: Iterable[ast.AST], package: str) -> dict[str, tuple[str, str]]:
    """Names bound by imports in ``nodes``: alias -> (module, symbol); symbol EVERYTHING for a module binding."""
    index = modules()
    out: dict[str, tuple[str, str]] = {}
    for top in nodes:
        for node in ast.walk(top):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        out[alias.asname] = (alias.name, EVERYTHING)
                    else:
                        head = alias.name.split(".")[0]
                        out[head] = (head, EVERYTHING)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")
                    parent = parent[: len(parent) - node.level + 1]
                    base = ".".join(parent + ([base] if base else []))
                for alias in node.names:
                    if alias.name == "*":
                        out[f"*{base}"] = (base, EVERYTHING)
                        continue
                    sub = f"{base}.{alias.name}"
                    out[alias.asname or alias.name] = (sub, EVERYTHING) if sub in index else (base, alias.name)
    return out


def _references(nodes: Iterable[ast.AST]) -> Iterator[tuple[str, str | None]]:
    """(name, attribute) for every ``name.attribute`` load, (name, None) for every other name load."""
    for top in nodes:
        attributed: set[int] = set()
        for node in ast.walk(top):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                attributed.add(id(node.value))
                yield node.value.id, node.attr
        for node in ast.walk(top):
            if isinstance(node, ast.Name) and id(node) not in attributed:
                yield node.id, None


def _package(module: Module) -> str:
    return module.name if module.path.name == "__init__.py" else module.name.rpartition(".")[0]


@functools.cache
def _unit_targets(module_name: str, unit: str) -> frozenset[tuple[str, str]]:
    module = modules()[module_name]
    nodes = module.units.get(unit, [])
    package = _package(module)
    module_level = _import_bindings(module.units[MODULE], package)
    local = _import_bindings(nodes, package)
    out: set[tuple[str, str]] = {(module_name, MODULE)}
    parts = module_name.split(".")
    out |= {(".".join(parts[:i]), MODULE) for i in range(1, len(parts))}
    out |= {target for alias, target in local.items() if alias.startswith("*")}
    for name, attribute in _references(nodes):
        binding = local.get(name) or module_level.get(name)
        if binding is None:
            if name in module.units and name != MODULE:
                out.add((module_name, name))
            continue
        target, symbol = binding
        if symbol == EVERYTHING and attribute is not None:
            sub = f"{target}.{attribute}"
            out.add((sub, EVERYTHING) if sub in modules() else (target, attribute))
        else:
            out.add((target, symbol))
    return frozenset((m, s) for m, s in out if m in modules())


@functools.cache
def _member_names(module_name: str, unit: str) -> frozenset[str]:
    """Attribute names a unit loads (``x.name``) and identifier-like strings it holds (``getattr(x, "name")``)."""
    names: set[str] = set()
    for top in modules()[module_name].units.get(unit, []):
        for node in ast.walk(top):
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                names.add(node.value)
    return frozenset(names)


def reach(entries: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
    """Every (module, unit) reachable from ``entries`` (unit EVERYTHING: all of a module).

    A method of a reached class is reached when reached code names it as an attribute anywhere (any receiver),
    or when it is a dunder method.
    """
    index = modules()
    seen: set[tuple[str, str]] = set()
    members: set[str] = set()
    todo = list(entries)
    while todo:
        while todo:
            module_name, unit = todo.pop()
            if (module_name, unit) in seen or module_name not in index:
                continue
            seen.add((module_name, unit))
            module = index[module_name]
            if unit == EVERYTHING:
                todo += [(module_name, u) for u in module.units]
                continue
            if unit not in module.units:
                # A name the module re-exports from an import, or a plain variable: follow the import if any.
                binding = _import_bindings(module.units[MODULE], _package(module)).get(unit)
                todo.append(binding if binding else (module_name, MODULE))
                continue
            members |= _member_names(module_name, unit)
            todo += list(_unit_targets(module_name, unit))
        for module_name, unit in list(seen):
            for candidate in index[module_name].units if module_name in index else ():
                owner, _, method = candidate.partition(".")
                if method and owner == unit and (module_name, candidate) not in seen and (
                        method in members or (method.startswith("__") and method.endswith("__"))):
                    todo.append((module_name, candidate))
    return seen


def calls_from(entries: Iterable[tuple[str, str]]) -> list[Call]:
    reached = reach(entries)
    index = modules()
    return [c for module_name, unit in reached if unit != EVERYTHING
            for c in index[module_name].calls if index[module_name].unit_of(c.line) == unit]


def handler_calls(handler_module: str) -> list[Call]:
    """Calls reachable from ``lambdas.handlers.<handler_module>``: its module code and its ``handler``."""
    name = f"lambdas.handlers.{handler_module}"
    return calls_from([(name, MODULE), (name, "handler")])


def trainer_calls() -> list[Call]:
    return calls_from([(m, EVERYTHING) for m in modules() if m.startswith("containers.trainer")])


# --- actions ---------------------------------------------------------------------------------------------------

S3_ACTIONS = "https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazons3.html"
S3_KMS = "https://docs.aws.amazon.com/AmazonS3/latest/userguide/UsingKMSEncryption.html#aws-managed-customer-managed-keys"
DYNAMODB_ACTIONS = "https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazondynamodb.html"
DYNAMODB_TRANSACTIONS = "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis-iam.html"
SNS_KMS = "https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html#sns-what-permissions-for-sse"
# Lambda's Invoke API is authorized by the action lambda:InvokeFunction ("Actions defined by AWS Lambda").
LAMBDA_ACTIONS = "https://docs.aws.amazon.com/service-authorization/latest/reference/list_awslambda.html"
# AssumeRole with session tags also needs sts:TagSession ("Permissions required to add session tags").
SESSION_TAGS = "https://docs.aws.amazon.com/IAM/latest/UserGuide/id_session-tags.html#id_session-tags_permissions-required"
SERVICE_AUTHORIZATION = "https://docs.aws.amazon.com/service-authorization/latest/reference/reference_policies_actions-resources-contextkeys.html"

# boto3 client name -> IAM service prefix ("Service Authorization Reference": one page per service).
PREFIX = {"s3": "s3", "dynamodb": "dynamodb", "stepfunctions": "states", "batch": "batch",
          "cloudwatch": "cloudwatch", "sns": "sns", "sqs": "sqs", "logs": "logs", "pricing": "pricing",
          "ec2": "ec2", "lambda": "lambda", "events": "events", "kms": "kms", "sts": "sts"}

# Operations whose IAM action is not "<prefix>:<OperationName>", from the Service Authorization Reference page of
# the service (S3: list_amazons3.html, "Actions defined by Amazon S3", where ListObjectsV2 is authorized by
# ListBucket and HeadObject by GetObject; DynamoDB: transaction-apis-iam.html).
S3_RENAMED = {"ListObjectsV2": ("s3:ListBucket",), "ListObjects": ("s3:ListBucket",),
              "HeadObject": ("s3:GetObject",), "DeleteObjects": ("s3:DeleteObject",),
              "CopyObject": ("s3:GetObject", "s3:PutObject"), "HeadBucket": ("s3:ListBucket",),
              "ListObjectVersions": ("s3:ListBucketVersions",)}
S3_READS = {"GetObject", "CopyObject"}  # decrypt an SSE-KMS object
S3_WRITES = {"PutObject", "CopyObject", "CreateMultipartUpload"}  # encrypt a new SSE-KMS object
TRANSACT_ITEM_ACTIONS = {"Put": "dynamodb:PutItem", "Update": "dynamodb:UpdateItem",
                         "Delete": "dynamodb:DeleteItem", "ConditionCheck": "dynamodb:ConditionCheckItem"}


@dataclass(frozen=True)
class Required:
    action: str
    doc: str


def required_actions(call: Call, *, kms_buckets: bool, kms_topic: bool) -> list[Required]:
    """The IAM actions AWS authorizes ``call`` against (for a presigned URL: the signer's, used when it is fetched)."""
    if call.service not in PREFIX:
        raise KeyError(f"{call.site}: no IAM prefix for boto3 service {call.service!r}; add it to PREFIX")
    prefix, op = PREFIX[call.service], call.operation
    if call.service == "s3":
        if op == "GetObject" and "VersionId" in call.keywords:
            out = [Required("s3:GetObjectVersion", S3_ACTIONS)]
        else:
            out = [Required(a, S3_ACTIONS) for a in S3_RENAMED.get(op, (f"s3:{op}",))]
        if kms_buckets and op in S3_READS:
            out.append(Required("kms:Decrypt", S3_KMS))
        if kms_buckets and op in S3_WRITES:
            out.append(Required("kms:GenerateDataKey", S3_KMS))
        return out
    if call.service == "dynamodb" and op == "TransactWriteItems":
        kinds = call.transact_kinds & set(TRANSACT_ITEM_ACTIONS) or set(TRANSACT_ITEM_ACTIONS)
        return [Required(TRANSACT_ITEM_ACTIONS[k], DYNAMODB_TRANSACTIONS) for k in sorted(kinds)]
    if call.service == "dynamodb" and op == "TransactGetItems":
        return [Required("dynamodb:GetItem", DYNAMODB_TRANSACTIONS)]
    if call.service == "lambda" and op == "Invoke":
        return [Required("lambda:InvokeFunction", LAMBDA_ACTIONS)]
    if call.service == "sts" and op == "GetCallerIdentity":
        # "No permissions are required to perform this operation. If an administrator attaches a policy to your
        # identity that explicitly denies access to the sts:GetCallerIdentity action, you can still perform this
        # operation" (STS API reference, "GetCallerIdentity"); the credentials function sends a job's presigned one.
        return []
    out = [Required(f"{prefix}:{op}", DYNAMODB_ACTIONS if prefix == "dynamodb" else SERVICE_AUTHORIZATION)]
    if call.service == "sts" and op == "AssumeRole" and "Tags" in call.keywords:
        out.append(Required("sts:TagSession", SESSION_TAGS))
    if call.service == "sns" and op == "Publish" and kms_topic:
        out += [Required("kms:GenerateDataKey", SNS_KMS), Required("kms:Decrypt", SNS_KMS)]
    return out
