"""The AWS network as the synthesized templates build it, for the rehearsal's jobs: what a job may reach.

A Batch job on AWS reaches only what its subnets and security groups let it reach. The rehearsal reads the app's VPC
from its templates and holds its jobs to the same two rules:

- **Reachability.** A job may call an AWS service only through an interface endpoint of that service in its
  subnets or a gateway endpoint on their route tables, or over a route to the internet (Amazon VPC, "Access AWS
  services through AWS PrivateLink"; a subnet with no internet route reaches a service only through an endpoint).
  Security groups apply on the way: the job's interface must allow HTTPS out, and an interface endpoint's groups
  must allow it in. :meth:`JobNetwork.environment` points the services a job reaches at the local AWS and every other
  one at a black hole that drops the call after a connect timeout (scaled down), which names the missing endpoint.
- **Node to node.** The nodes of a multi-node parallel job talk over the interfaces Batch gives their containers:
  "The elastic network interfaces that are created and attached to an MNP task will use the security groups
  specified in your compute environment. If you don't specify a security group, the default security group for the
  VPC is used" (AWS Batch, "Compute environment considerations for multi-node parallel jobs"; MNP jobs run in
  ``awsvpc`` mode, "Networking modes for AWS Batch jobs"). A single-node job runs on the host's own interfaces
  (the compute environment's groups, else its launch template's). :meth:`JobNetwork.rendezvous_problem` says which
  rule is missing when the nodes cannot reach each other.

A VPC's default group has AWS's default rules (Amazon VPC, "Default security groups for your VPCs": inbound from
its own members, all outbound) unless CDK's ``Custom::VpcRestrictDefaultSG`` revokes them.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from dualtrack.local.json_shapes import integer, mapping, sequence, text
from lambdas.domain.json_types import JsonIn, JsonMapping

# An interface or gateway endpoint's service (com.amazonaws.<region>.<name>) -> the botocore services it serves.
ENDPOINT_SERVICES: dict[str, tuple[str, ...]] = {
    "s3": ("s3",), "lambda": ("lambda",), "monitoring": ("cloudwatch",), "logs": ("logs",), "sts": ("sts",),
    "ecr.api": ("ecr",), "ecs": ("ecs",), "dynamodb": ("dynamodb",), "states": ("stepfunctions",),
    "batch": ("batch",), "events": ("events",), "sns": ("sns",), "sqs": ("sqs",), "kms": ("kms",),
    "ssm": ("ssm",), "secretsmanager": ("secretsmanager",),
}
# SigV4's signing name (the credential scope's service) -> the endpoint's name, where they differ.
SIGNING_TO_ENDPOINT = {"ecr": "ecr.api", "states": "states"}
HTTPS = 443
# torchrun's default rendezvous port and the Neuron root communicator's (containers/trainer/launch.py: RENDEZVOUS_PORT,
# NEURON_ROOT_COMM_PORT; the trainer image is not importable from the local runtime, so they are restated here).
RENDEZVOUS_PORT = 29500
# What the nodes of a job open to each other besides it: the Neuron runtime's root communicator, and the ephemeral
# ports gloo, NCCL and libfabric connect on (the EFA rule: "all inbound and outbound traffic to and from the security
# group itself", AWS Batch "Elastic Fabric Adapter").
NODE_PORTS = (RENDEZVOUS_PORT, 62182, 1024, 32768, 65535)
ANY = ipaddress.IPv4Network("0.0.0.0/0")
# The resources of one stack by type: (``<stack>/<logical id>``, properties) each.
_ByType = Mapping[str, list[tuple[str, JsonMapping]]]


@dataclass(frozen=True)
class Rule:
    """One security group rule: protocol ("-1" = all), port range, and a peer (CIDR, group or prefix list)."""

    protocol: str
    from_port: int
    to_port: int
    cidr: ipaddress.IPv4Network | None = None
    group: str | None = None
    prefix_list: str | None = None

    def admits(self, protocol: str, port: int, *, groups: Iterable[str] = (),
               networks: Iterable[ipaddress.IPv4Network] = (), prefix_list_ok: bool = False) -> bool:
        if self.protocol not in ("-1", "all") and self.protocol.lower() not in (protocol, {"tcp": "6"}[protocol]):
            return False
        if self.protocol not in ("-1", "all") and not self.from_port <= port <= self.to_port:
            return False
        if self.group is not None and self.group in set(groups):
            return True
        if self.cidr is not None and any(n.subnet_of(self.cidr) for n in networks):
            return True
        return self.prefix_list is not None and prefix_list_ok

    def describe(self) -> str:
        peer = str(self.cidr) if self.cidr else self.group or self.prefix_list or "?"
        ports = "all" if self.protocol in ("-1", "all") else f"{self.protocol} {self.from_port}-{self.to_port}"
        return f"{ports} {peer}"


@dataclass
class Group:
    id: str
    ingress: list[Rule] = field(default_factory=list)
    egress: list[Rule] = field(default_factory=list)
    note: str = ""  # why its rules are what they are (the default group, revoked)


@dataclass(frozen=True)
class Endpoint:
    name: str  # the service part: "s3", "lambda", "ecr.api"
    kind: str  # Interface | Gateway
    subnets: frozenset[str] = frozenset()
    route_tables: frozenset[str] = frozenset()
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class Environment:
    """A compute environment's network: its subnets, the groups of its hosts and of its MNP containers."""

    logical_id: str
    subnets: tuple[str, ...]
    host_groups: tuple[str, ...]
    task_groups: tuple[str, ...]
    task_groups_reason: str


class VpcModel:
    """Subnets, routes, endpoints and security groups of the app's VPC(s), and the compute environments' networks."""

    def __init__(self, templates: Mapping[str, JsonMapping], *, region: str):
        self.region = region
        self.templates = templates
        self.vpc_cidr: dict[str, ipaddress.IPv4Network] = {}
        self.subnet_cidr: dict[str, ipaddress.IPv4Network] = {}
        self.subnet_vpc: dict[str, str] = {}
        self.subnet_table: dict[str, str] = {}
        self.internet_tables: set[str] = set()
        self.groups: dict[str, Group] = {}
        self.endpoints: list[Endpoint] = []
        self.environments: dict[str, Environment] = {}
        self.queue_environments: dict[str, list[str]] = {}  # queue name -> compute environment logical ids
        for stack, template in templates.items():
            self._read(stack, mapping(template.get("Resources") or {}))

    # ---- reading the templates ----------------------------------------------------------------------------
    def _id(self, stack: str, value: JsonIn) -> JsonIn:
        """A resource reference as an id this model uses (``<stack>/<logical id>``), a literal as itself."""
        if isinstance(value, dict) and len(value) == 1:
            (fn, arg), = value.items()
            if fn == "Ref":
                return {"AWS::Region": self.region}.get(text(arg), f"{stack}/{arg}")
            if fn == "Fn::GetAtt":
                logical_id, attribute = arg if isinstance(arg, list) else text(arg).split(".", 1)
                if attribute == "DefaultSecurityGroup":
                    return f"{stack}/{logical_id}#default"
                if attribute == "CidrBlock":
                    return str(self.vpc_cidr.get(f"{stack}/{logical_id}", ANY))
                return f"{stack}/{logical_id}"
            if fn == "Fn::Join":
                separator, parts = sequence(arg)
                return text(separator).join(str(self._id(stack, part)) for part in sequence(parts))
        if isinstance(value, list):
            return [self._id(stack, item) for item in value]
        return value

    def _ids(self, stack: str, value: JsonIn) -> list[str]:
        """A list of references and literals, as ids."""
        return [str(item) for item in sequence(self._id(stack, value))]

    def _read(self, stack: str, resources: JsonMapping) -> None:
        by_type: dict[str, list[tuple[str, JsonMapping]]] = {}
        for logical_id, value in resources.items():
            resource = mapping(value)
            by_type.setdefault(text(resource["Type"]), []).append(
                (f"{stack}/{logical_id}", mapping(resource.get("Properties") or {})))
        self._read_vpcs(stack, by_type)
        self._read_routing(stack, by_type)
        self._read_security_groups(stack, by_type)
        self._read_endpoints(stack, by_type)
        self._read_compute_environments(stack, by_type)
        self._read_job_queues(stack, by_type)

    def _read_vpcs(self, stack: str, by_type: _ByType) -> None:
        """Each VPC's CIDR and default security group (its rules revoked where CDK restricts it)."""
        for rid, props in by_type.get("AWS::EC2::VPC", []):
            self.vpc_cidr[rid] = ipaddress.IPv4Network(str(props.get("CidrBlock", "0.0.0.0/0")))
            # AWS's default group: inbound from its own members, all outbound.
            default = f"{rid}#default"
            self.groups[default] = Group(default, ingress=[Rule("-1", 0, 65535, group=default)],
                                         egress=[Rule("-1", 0, 65535, cidr=ANY)],
                                         note=f"the default security group of {rid}")
        for _, props in by_type.get("Custom::VpcRestrictDefaultSG", []):
            group = self.groups.get(str(self._id(stack, props.get("DefaultSecurityGroupId"))))
            if group is not None:
                group.ingress.clear()
                group.egress.clear()
                group.note += (" (its default rules revoked by Custom::VpcRestrictDefaultSG, CDK's "
                               "restrictDefaultSecurityGroup)")

    def _read_routing(self, stack: str, by_type: _ByType) -> None:
        """The subnets, their route tables, and the route tables with a route to the internet."""
        for rid, props in by_type.get("AWS::EC2::Subnet", []):
            self.subnet_cidr[rid] = ipaddress.IPv4Network(str(props.get("CidrBlock", "0.0.0.0/0")))
            self.subnet_vpc[rid] = str(self._id(stack, props.get("VpcId")))
        for _, props in by_type.get("AWS::EC2::SubnetRouteTableAssociation", []):
            self.subnet_table[str(self._id(stack, props["SubnetId"]))] = str(self._id(stack, props["RouteTableId"]))
        for _, props in by_type.get("AWS::EC2::Route", []):
            if props.get("DestinationCidrBlock") == "0.0.0.0/0" and (props.get("GatewayId") or
                                                                     props.get("NatGatewayId")):
                self.internet_tables.add(str(self._id(stack, props["RouteTableId"])))

    def _read_security_groups(self, stack: str, by_type: _ByType) -> None:
        """The security groups and their rules, inline and as separate ingress and egress resources."""
        for rid, props in by_type.get("AWS::EC2::SecurityGroup", []):
            group = self.groups.setdefault(rid, Group(rid))
            group.ingress += [self._rule(stack, mapping(r), "Source")
                              for r in sequence(props.get("SecurityGroupIngress") or [])]
            if "SecurityGroupEgress" in props:
                group.egress += [self._rule(stack, mapping(r), "Destination")
                                 for r in sequence(props["SecurityGroupEgress"] or [])]
            else:  # CloudFormation keeps EC2's default outbound rule when the template states none
                group.egress.append(Rule("-1", 0, 65535, cidr=ANY))
        for kind, side, peer in (("AWS::EC2::SecurityGroupIngress", "ingress", "Source"),
                                 ("AWS::EC2::SecurityGroupEgress", "egress", "Destination")):
            for _, props in by_type.get(kind, []):
                group_id = str(self._id(stack, props["GroupId"]))
                getattr(self.groups.setdefault(group_id, Group(group_id)), side).append(
                    self._rule(stack, props, peer))

    def _read_endpoints(self, stack: str, by_type: _ByType) -> None:
        """The VPC endpoints: each one's service, kind, subnets, route tables and security groups."""
        for _, props in by_type.get("AWS::EC2::VPCEndpoint", []):
            service = str(self._id(stack, props["ServiceName"]))
            name = re.sub(r"^com\.amazonaws\.[a-z0-9-]+\.", "", service)
            self.endpoints.append(Endpoint(
                name=name, kind=str(props.get("VpcEndpointType", "Gateway")),
                subnets=frozenset(self._ids(stack, props.get("SubnetIds") or [])),
                route_tables=frozenset(self._ids(stack, props.get("RouteTableIds") or [])),
                groups=tuple(self._ids(stack, props.get("SecurityGroupIds") or []))))

    def _read_compute_environments(self, stack: str,
                                   by_type: _ByType) -> None:
        """Each compute environment's subnets and the security groups of its hosts and of its tasks."""
        templates = {rid: mapping(props.get("LaunchTemplateData") or {})
                     for rid, props in by_type.get("AWS::EC2::LaunchTemplate", [])}
        for rid, props in by_type.get("AWS::Batch::ComputeEnvironment", []):
            resources_ = mapping(props.get("ComputeResources") or {})
            subnets = tuple(self._ids(stack, resources_.get("Subnets") or []))
            named = tuple(self._ids(stack, resources_.get("SecurityGroupIds") or []))
            launch_template = mapping(resources_.get("LaunchTemplate") or {})
            data = templates.get(str(self._id(stack, launch_template.get("LaunchTemplateId"))), {})
            interfaces = [mapping(i) for i in sequence(data.get("NetworkInterfaces") or [])]
            primary = next((i for i in interfaces if integer(i.get("DeviceIndex", 0)) == 0), None)
            host = named or tuple(self._ids(stack, (primary or {}).get("Groups")
                                            or data.get("SecurityGroupIds") or []))
            vpc = self.subnet_vpc.get(subnets[0], "") if subnets else ""
            if named:
                task, reason = named, "the compute environment's security groups"
            else:
                task = (f"{vpc}#default",)
                reason = ("the VPC's default security group (the compute environment names none"
                          + (", as an EFA launch template's interfaces require" if interfaces else "") + ")")
            self.environments[rid] = Environment(rid, subnets, host or (f"{vpc}#default",), task, reason)

    def _read_job_queues(self, stack: str, by_type: _ByType) -> None:
        """Each job queue's compute environments, in order."""
        for _, props in by_type.get("AWS::Batch::JobQueue", []):
            name = str(props.get("JobQueueName") or "")
            self.queue_environments[name] = [str(self._id(stack, mapping(item)["ComputeEnvironment"]))
                                             for item in sequence(props.get("ComputeEnvironmentOrder") or [])]

    def _rule(self, stack: str, raw: JsonMapping, peer: str) -> Rule:
        cidr = raw.get("CidrIp")
        group = raw.get(f"{peer}SecurityGroupId")
        prefix = raw.get(f"{peer}PrefixListId")
        protocol = str(raw.get("IpProtocol", "-1"))
        return Rule(protocol, integer(raw.get("FromPort", 0)), integer(raw.get("ToPort", 65535)),
                    cidr=ipaddress.IPv4Network(str(self._id(stack, cidr)), strict=False) if cidr is not None else None,
                    group=str(self._id(stack, group)) if group is not None else None,
                    prefix_list=str(self._id(stack, prefix)) if prefix is not None else None)

    # ---- the two rules --------------------------------------------------------------------------------------
    def _environment(self, queue: str) -> Environment | None:
        found = self.queue_environments.get(queue) or []
        return self.environments.get(found[0]) if found else None

    def reach(self, queue: str, *, multi_node: bool) -> dict[str, str | None]:
        """Each endpoint service a job on ``queue`` could call -> None when it reaches it, else why not; the key
        ``"*"`` is the internet route (None when the subnets have one)."""
        environment = self._environment(queue)
        if environment is None:
            return {"*": f"job queue {queue} is not in the templates"}
        groups = environment.task_groups if multi_node else environment.host_groups
        networks = [self.subnet_cidr[s] for s in environment.subnets if s in self.subnet_cidr]
        tables = {self.subnet_table.get(s, "") for s in environment.subnets}
        out: dict[str, str | None] = {}
        out["*"] = None if tables & self.internet_tables and self._egress(groups, ANY, None) is None else (
            "its subnets have no route to the internet (no internet or NAT gateway)")
        for endpoint in self.endpoints:
            if endpoint.kind == "Interface":
                # Private DNS answers with the endpoint's interfaces, reachable from any subnet of its VPC.
                vpcs = {self.subnet_vpc.get(s) for s in endpoint.subnets}
                if not vpcs & {self.subnet_vpc.get(s) for s in environment.subnets}:
                    problem: str | None = f"the {endpoint.name} endpoint is not in the job's VPC"
                else:
                    targets = [self.subnet_cidr[s] for s in endpoint.subnets if s in self.subnet_cidr] or [ANY]
                    problem = (next((p for p in (self._egress(groups, t, set(endpoint.groups)) for t in targets)
                                     if p), None)
                               or self._ingress(endpoint, groups, networks))
            else:
                problem = (None if endpoint.route_tables & tables else
                           f"the {endpoint.name} gateway endpoint is not on the job's route tables")
                problem = problem or self._egress(groups, ANY, None, prefix_list_ok=True)
            if out.get(endpoint.name, "x") is not None:
                out[endpoint.name] = problem
        return out

    def _egress(self, groups: Iterable[str], network: ipaddress.IPv4Network, peer_groups: set[str] | None,
                *, prefix_list_ok: bool = False) -> str | None:
        groups = tuple(groups)
        for group_id in groups:
            for rule in self.groups.get(group_id, Group(group_id)).egress:
                if rule.admits("tcp", HTTPS, groups=peer_groups or (), networks=[network],
                               prefix_list_ok=prefix_list_ok):
                    return None
        return f"no outbound HTTPS rule in {self._names(groups)}"

    def _ingress(self, endpoint: Endpoint, groups: Iterable[str],
                 networks: list[ipaddress.IPv4Network]) -> str | None:
        for group_id in endpoint.groups:
            for rule in self.groups.get(group_id, Group(group_id)).ingress:
                if rule.admits("tcp", HTTPS, groups=groups, networks=networks):
                    return None
        return f"the {endpoint.name} endpoint's groups ({', '.join(endpoint.groups)}) admit no HTTPS from the job"

    def rendezvous_problem(self, queue: str, ports: Iterable[int] = NODE_PORTS) -> str | None:
        """None when the nodes of a multi-node job on ``queue`` can reach each other on every TCP port they use
        (the rendezvous, the Neuron root communicator, the collectives' ephemeral ports); else which rule is
        missing, and where the nodes' groups come from."""
        environment = self._environment(queue)
        if environment is None:
            return f"job queue {queue} is not in the templates"
        groups = environment.task_groups
        networks = [self.subnet_cidr[s] for s in environment.subnets if s in self.subnet_cidr]
        for port in ports:
            inbound = any(rule.admits("tcp", port, groups=groups, networks=networks)
                          for g in groups for rule in self.groups.get(g, Group(g)).ingress)
            outbound = any(rule.admits("tcp", port, groups=groups, networks=networks)
                           for g in groups for rule in self.groups.get(g, Group(g)).egress)
            if inbound and outbound:
                continue
            missing = " and ".join(side for side, ok in (("inbound", inbound), ("outbound", outbound)) if not ok)
            return (f"the nodes' interfaces get {environment.task_groups_reason}: {self._names(groups)}, which has "
                    f"no {missing} rule for TCP {port} between the job's nodes (they need all TCP between them)")
        return None

    def _names(self, groups: Iterable[str]) -> str:
        return ", ".join(f"{g} ({self.groups[g].note})" if g in self.groups and self.groups[g].note else g
                         for g in groups)


# ---- what a local job sees ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Denial:
    job: str
    service: str
    reason: str


@dataclass
class JobNetwork:
    """Applies :class:`VpcModel` to the rehearsal's jobs: their endpoints (environment variables) and their nodes."""

    model: VpcModel
    local_endpoint: str  # the local AWS every reachable service is at
    connect_timeout_s: float = 60.0  # botocore's default connect timeout, what a call to no endpoint waits
    time_scale: float = 60.0
    on_denied: Callable[[Denial], None] | None = None
    denials: list[Denial] = field(default_factory=list)
    _hole: _BlackHole | None = None
    _reach: dict[tuple[str, bool], dict[str, str | None]] = field(default_factory=dict)
    # The jobs' threads and the black hole's threads read and record concurrently.
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @contextlib.contextmanager
    def install(self) -> Iterator[JobNetwork]:
        hole = _BlackHole(delay_s=self.connect_timeout_s / self.time_scale, on_call=self._denied)
        with hole.serving():
            self._hole = hole
            try:
                yield self
            finally:
                self._hole = None

    def reach(self, queue: str, multi_node: bool) -> dict[str, str | None]:
        key = (queue, multi_node)
        with self._lock:
            if key not in self._reach:
                self._reach[key] = self.model.reach(queue, multi_node=multi_node)
            return self._reach[key]

    def environment(self, queue: str, *, multi_node: bool, job_name: str) -> dict[str, str]:
        """The endpoint variables of a job's container: the services its network reaches are the local AWS, every
        other one the black hole (botocore's ``AWS_ENDPOINT_URL`` and ``AWS_ENDPOINT_URL_<SERVICE>``)."""
        reach = self.reach(queue, multi_node)
        assert self._hole is not None, "JobNetwork.install() first"
        env = {"AWS_SDK_UA_APP_ID": job_name[:50]}  # names the caller to the black hole (User-Agent app/<id>)
        if reach.get("*") is None:
            env["AWS_ENDPOINT_URL"] = self.local_endpoint
            return env
        env["AWS_ENDPOINT_URL"] = self._hole.url
        for name, problem in reach.items():
            if problem is None:
                for service in ENDPOINT_SERVICES.get(name, ()):
                    env[f"AWS_ENDPOINT_URL_{_service_id(service)}"] = self.local_endpoint
        return env

    def rendezvous_problem(self, queue: str) -> str | None:
        return self.model.rendezvous_problem(queue)

    def refuse(self, job: str, service: str, reason: str) -> None:
        """Record what the network refused a job (once per job and service) and tell ``on_denied``."""
        with self._lock:
            if any(d.job == job and d.service == service for d in self.denials):
                return
            denial = Denial(job, service, reason)
            self.denials.append(denial)
        if self.on_denied is not None:
            self.on_denied(denial)

    def _denied(self, caller: str, signing_name: str) -> None:
        endpoint = SIGNING_TO_ENDPOINT.get(signing_name, signing_name)
        with self._lock:
            reaches = list(self._reach.values())
        why = next((reach[endpoint] for reach in reaches if reach.get(endpoint)), None)
        fix = ("fix that rule" if why else f"add an interface VPC endpoint for com.amazonaws.{self.model.region}."
               f"{endpoint} (infra/constructs/network.py)")
        reason = why or f"the job's subnets have no {endpoint} endpoint and no route to the internet"
        self.refuse(caller or "unknown job", endpoint, f"{reason}: on AWS the call times out; {fix}")


@functools.cache
def _service_id(service: str) -> str:
    """botocore's name for a service's endpoint variable: its service id, spaces as underscores, upper case."""
    import botocore.session

    model = botocore.session.get_session().get_service_model(service)
    return str(model.service_id).replace(" ", "_").upper()


class _BlackHole:
    """A loopback listener standing in for an address nothing answers: it reads a request's head (to name the
    service and the caller), waits the scaled connect timeout and drops the connection unanswered."""

    def __init__(self, *, delay_s: float, on_call: Callable[[str, str], None]):
        self.delay_s = delay_s
        self.on_call = on_call
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._stop = threading.Event()

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        thread = threading.Thread(target=self._serve, name="network-black-hole", daemon=True)
        thread.start()
        try:
            yield
        finally:
            self._stop.set()
            with contextlib.suppress(OSError):
                self._sock.close()
            thread.join(timeout=5)

    def _serve(self) -> None:
        self._sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                connection, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                time.sleep(0.05)  # out of descriptors, say: try again without spinning
                continue
            threading.Thread(target=self._drop, args=(connection,), daemon=True).start()

    def _drop(self, connection: socket.socket) -> None:
        with connection:
            connection.settimeout(5)
            head = b""
            with contextlib.suppress(OSError):
                while b"\r\n\r\n" not in head and len(head) < 65536:
                    chunk = connection.recv(4096)
                    if not chunk:
                        break
                    head += chunk
            text = head.decode("latin-1")
            scope = re.search(r"Credential=[^/]+/\d{8}/[^/]+/([^/]+)/aws4_request", text)
            caller = re.search(r"(?im)^user-agent:.*\bapp/(\S+)", text)
            try:
                self.on_call(caller.group(1) if caller else "", scope.group(1) if scope else "unknown")
            except Exception:  # a refusal that cannot be recorded must still be seen
                logging.getLogger(__name__).exception("recording a refused call failed")
            deadline = time.monotonic() + self.delay_s
            while time.monotonic() < deadline and not self._stop.is_set():
                time.sleep(0.05)
