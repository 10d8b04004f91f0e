"""The Kubernetes example (config/kubernetes.yaml) and the PrometheusRule resources `inferdeck rules`
writes, validated as an API server would take them: the built-in kinds against the Kubernetes API's
own schemas (kubernetes-validate's copy, strict: an unknown field fails), the Prometheus Operator's
kinds against their CRDs' openAPIV3Schema (tests/fixtures/k8s, prometheus-operator 0.93.0, unknown
fields refused as `kubectl apply --validate=strict` does); the exporter pod against the Pod Security
"restricted" profile's rules (written here from the Kubernetes documentation); the pieces against
each other (the plan loads, the paths are mounted, the monitors select the pods and carry the node)."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from console.out.slorules import k8s_name, rule_groups, to_yaml
from console.settings import load_settings
from tests.conftest import ROOT

EXAMPLE = ROOT / "config" / "kubernetes.yaml"
CRDS = ROOT / "tests" / "fixtures" / "k8s"
K8S = "1.37"
ANNOTATIONS_MAX = 256 * 1024  # the API server's limit on an object's annotations, in bytes
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _strict(schema: Any) -> Any:
    """A CRD's structural schema with unknown fields refused wherever the CRD does not keep them
    (x-kubernetes-preserve-unknown-fields): what strict field validation does."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if isinstance(out.get("pattern"), str) and "(?i)" in out["pattern"]:
            # Go's RE2 takes an inline flag anywhere; Python's only first
            out["pattern"] = "(?i)" + out["pattern"].replace("(?i)", "")
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@cache
def _crd_schemas() -> dict[tuple[str, str], dict]:
    out = {}
    for path in CRDS.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for v in crd["spec"]["versions"]:
            schema = copy.deepcopy(v["schema"]["openAPIV3Schema"])
            out[(f"{group}/{v['name']}", kind)] = _strict(schema)
    return out


def validate(doc: dict) -> None:
    """Raises when the API server (with the operator's CRDs installed) would refuse ``doc``."""
    name = doc["metadata"]["name"]
    assert DNS1123.match(name) and len(name) <= 253, name
    schema = _crd_schemas().get((doc["apiVersion"], doc["kind"]))
    if schema is None:
        kubernetes_validate.validate(doc, K8S, strict=True)
        return
    body = {k: v for k, v in doc.items() if k != "metadata"}
    jsonschema.validate(body, {**schema, "properties": {**schema["properties"], "metadata": {}}})
    kubernetes_validate.validate(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": doc["metadata"]}, K8S, strict=True
    )  # the object's metadata, by the API's ObjectMeta


def example() -> list[dict]:
    return [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]


def _by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def test_every_resource_of_the_example_is_what_the_api_server_takes():
    docs = example()
    assert {d["kind"] for d in docs} >= {"Namespace", "ConfigMap", "Secret", "Service",
                                         "DaemonSet", "PodMonitor"}  # fmt: skip
    for d in docs:
        validate(d)


def test_a_planted_mistake_is_refused():
    """A validator that takes anything proves nothing: a misspelt field in a built-in kind and in
    a CRD kind, and a wrong type, are each refused."""
    docs = example()
    ds = copy.deepcopy(_by_kind(docs, "DaemonSet")[0])
    ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsNonroot"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(ds)
    pm = copy.deepcopy(_by_kind(docs, "PodMonitor")[0])
    pm["spec"]["podMetricsEndpoints"][0]["relabellings"] = []
    with pytest.raises(jsonschema.ValidationError):
        validate(pm)
    pm = copy.deepcopy(_by_kind(docs, "PodMonitor")[0])
    pm["spec"]["podMetricsEndpoints"][0]["interval"] = 15
    with pytest.raises(jsonschema.ValidationError):
        validate(pm)


# Pod Security Standards, "restricted" (with "baseline" under it), as the Kubernetes documentation
# lists them: https://kubernetes.io/docs/concepts/security/pod-security-standards/
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}  # fmt: skip


def restricted(pod: dict) -> list[str]:
    """What in a pod spec the "restricted" profile refuses (empty: admitted)."""
    why = []
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(host):
            why.append(host)
    for vol in pod.get("volumes", []):
        kinds = set(vol) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            why.append(f"volume {vol['name']}: {sorted(kinds - RESTRICTED_VOLUMES)}")
    pod_sc = pod.get("securityContext", {})
    for c in pod.get("initContainers", []) + pod["containers"]:
        sc = c.get("securityContext", {})
        name = c["name"]
        if sc.get("privileged"):
            why.append(f"{name}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            why.append(f"{name}: allowPrivilegeEscalation is not false")
        if sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is not True:
            why.append(f"{name}: runAsNonRoot is not true")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            why.append(f"{name}: runAsUser 0")
        seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            why.append(f"{name}: seccompProfile {seccomp}")
        caps = sc.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            why.append(f"{name}: capabilities not dropped (ALL)")
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            why.append(f"{name}: capabilities added {caps['add']}")
        for port in c.get("ports", []):
            if port.get("hostPort"):
                why.append(f"{name}: hostPort {port['hostPort']}")
    return why


def test_the_exporter_runs_under_pod_security_restricted():
    docs = example()
    ns = _by_kind(docs, "Namespace")[0]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    for ds in _by_kind(docs, "DaemonSet"):
        assert ds["metadata"]["namespace"] == ns["metadata"]["name"]
        assert restricted(ds["spec"]["template"]["spec"]) == []
    # the checker catches what the old example did (host network, a container with no context)
    old = copy.deepcopy(_by_kind(docs, "DaemonSet")[0]["spec"]["template"]["spec"])
    old["hostNetwork"] = True
    del old["securityContext"], old["containers"][0]["securityContext"]
    assert {"hostNetwork", "export: allowPrivilegeEscalation is not false",
            "export: runAsNonRoot is not true", "export: seccompProfile None",
            "export: capabilities not dropped (ALL)"} <= set(restricted(old))  # fmt: skip


def _arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def _mounted(pod: dict, container: dict, path: str) -> tuple[dict, str]:
    """The volume a file path lies on and the path inside it."""
    for m in container["volumeMounts"]:
        root = m["mountPath"].rstrip("/") + "/"
        if path.startswith(root):
            vol = next(v for v in pod["volumes"] if v["name"] == m["name"])
            return vol, path[len(root) :]
    raise AssertionError(f"{path} is on no mounted volume")


def test_the_pieces_fit_each_other(tmp_path: Path):
    docs = example()
    ds = _by_kind(docs, "DaemonSet")[0]
    pod = ds["spec"]["template"]["spec"]
    c = pod["containers"][0]
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # the plan: the ConfigMap's key the args name, read as inferdeck reads a config file
    vol, key = _mounted(pod, c, _arg(c["args"], "--config"))
    cm = next(
        d for d in _by_kind(docs, "ConfigMap") if d["metadata"]["name"] == vol["configMap"]["name"]
    )
    (tmp_path / key).write_text(cm["data"][key])
    settings = load_settings(tmp_path / key)
    assert settings.engines and settings.services
    # the token: the Secret's key, on a secret volume (never an environment variable)
    vol, key = _mounted(pod, c, _arg(c["args"], "--token-file"))
    secret = next(
        d for d in _by_kind(docs, "Secret") if d["metadata"]["name"] == vol["secret"]["secretName"]
    )
    assert key in secret["stringData"] and not any("TOKEN" in e["name"] for e in c.get("env", []))
    # probes: the open health path on the served port; /metrics would answer 401 to a kubelet
    port = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert _arg(c["args"], "--listen").endswith(f":{port['metrics']}")
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    # the read-only root: inferdeck's state (XDG_STATE_HOME) on a writable volume
    env = {e["name"]: e["value"] for e in c["env"]}
    vol, _ = _mounted(pod, c, env["XDG_STATE_HOME"] + "/x")
    assert "emptyDir" in vol
    # the exporter's monitor: selects its pods, reads the token from a Secret in its namespace
    monitors = {d["metadata"]["name"]: d for d in _by_kind(docs, "PodMonitor")}
    mon = monitors["inferdeck-export"]
    assert mon["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ep = mon["spec"]["podMetricsEndpoints"][0]
    assert ep["port"] == "metrics"
    assert ep["authorization"]["credentials"]["name"] == secret["metadata"]["name"]
    assert mon["metadata"]["namespace"] == secret["metadata"]["namespace"]
    # every monitor names the series with the pod's node: one fleet row per node
    for m in monitors.values():
        for ep in m["spec"]["podMetricsEndpoints"]:
            assert {
                "sourceLabels": ["__meta_kubernetes_pod_node_name"],
                "targetLabel": "node",
            } in ep["relabelings"]
    # each engine: its node-local Service (the exporter reads the engine pod on its own node) and
    # the labels the engines' monitor puts on its series, which the SLO rules select by
    services = {
        (d["metadata"]["namespace"], d["metadata"]["name"]): d for d in _by_kind(docs, "Service")
    }
    engines_mon = monitors["inference-engines"]
    kept = {"namespace", *engines_mon["spec"].get("podTargetLabels", [])}
    for e in settings.engines:
        host = re.match(r"http://([^.:/]+)\.([^.:/]+)\.svc:(\d+)/", e.url)
        assert host, e.url
        svc = services[(host.group(2), host.group(1))]
        assert svc["spec"]["internalTrafficPolicy"] == "Local"
        assert int(host.group(3)) in {p["port"] for p in svc["spec"]["ports"]}
        assert set(e.prometheus_labels) <= kept
        assert e.prometheus_labels["namespace"] == engines_mon["metadata"]["namespace"]
        expr = engines_mon["spec"]["selector"]["matchExpressions"][0]
        assert svc["spec"]["selector"][expr["key"]] in expr["values"]
        assert e.prometheus_labels[expr["key"]] == svc["spec"]["selector"][expr["key"]]


def _many_services(n: int) -> Any:
    from console.settings import Settings

    engines = [{"name": f"e{i}", "url": f"http://10.0.{i // 200}.{i % 200 + 1}:8000/metrics",
                "kind": "vllm"} for i in range(n)]  # fmt: skip
    services = [{"name": f"Chat_{i}" if i % 2 else f"chat-{i}", "engine": f"e{i}",
                 "model": "llama-3.1-8b", "weight_bits": 16, "device": "0",
                 "tokens_per_sequence": 8192, "concurrent_sequences": 8,
                 "slo": {"ttft_s": 1.0, "tpot_s": 0.05, "completion": 0.995}}
                for i in range(n)]  # fmt: skip
    return Settings.model_validate({"engines": engines, "services": services})


def test_slo_rules_go_one_prometheusrule_per_service_each_under_the_annotation_limit():
    """`kubectl apply` keeps the whole object as JSON in an annotation (256 KiB at most): one
    PrometheusRule of every service's rules passed it at about 21 services. One per service
    never nears it; together they hold exactly the rules of the one file."""
    settings = _many_services(30)
    doc, skipped = rule_groups(settings)
    whole = json.dumps(yaml.safe_load(to_yaml(doc, skipped, "prometheusrule")))
    assert len(whole) > ANNOTATIONS_MAX  # what one resource was: refused
    resources = list(yaml.safe_load_all(to_yaml(doc, skipped, "prometheusrule", per_service=True)))
    assert len(resources) == 30
    names = [r["metadata"]["name"] for r in resources]
    assert len(set(names)) == 30 and "inferdeck-slo-chat-0" in names
    assert f"inferdeck-slo-{k8s_name('Chat_1')}" in names and k8s_name("Chat_1") != "chat-1"
    rules = []
    for r in resources:
        validate(r)
        assert len(json.dumps(r)) < ANNOTATIONS_MAX / 8
        service = {x["labels"]["service"] for g in r["spec"]["groups"] for x in g["rules"]}
        assert len(service) == 1
        rules += [x for g in r["spec"]["groups"] for x in g["rules"]]
        groups = [g["name"] for g in r["spec"]["groups"]]
        assert len(groups) == 2 and all(g.startswith(r["metadata"]["name"]) for g in groups)
    everything = [x for g in doc["groups"] for x in g["rules"]]
    assert sorted(map(json.dumps, rules)) == sorted(map(json.dumps, everything))


@pytest.mark.parametrize("flags", [["--demo"], ["--slo"], ["--fleet"]])
def test_every_prometheusrule_the_cli_writes_is_what_the_api_server_takes(flags, tmp_path: Path):
    """The exporter's alert rules, the fleet's records, and the SLO rules of the example's own
    plan (one resource per service), as the README's `kubectl apply` lines take them."""
    if flags == ["--slo"]:
        cm = _by_kind(example(), "ConfigMap")[0]
        (tmp_path / "h100.yaml").write_text(cm["data"]["h100.yaml"])
        flags = ["--slo", "--config", str(tmp_path / "h100.yaml")]
    out = subprocess.run([sys.executable, "-m", "console", "rules", *flags, "--format",
                          "prometheusrule"], cwd=ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert docs and all(d["kind"] == "PrometheusRule" for d in docs)
    for d in docs:
        validate(d)
    if "--slo" in flags:
        assert [d["metadata"]["name"] for d in docs] == ["inferdeck-slo-chat"]
        sel = next(r["expr"] for r in docs[0]["spec"]["groups"][0]["rules"])
        assert 'namespace="ai"' in sel and 'app="chat"' in sel  # the engines' monitor's labels
