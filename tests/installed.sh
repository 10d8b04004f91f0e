#!/usr/bin/env bash
# Installs inferdeck as an operator does — the built wheel into a fresh venv outside the tree —
# and runs every command from an empty folder, with nothing of the source tree on sys.path.
# A part missing from the wheel (a subpackage, a YAML file, the stylesheet) fails here.
# Usage: tests/installed.sh [PYTHON]   (run by .ci/run; needs PyPI for the dependencies)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
py=${1:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "installed.sh: FAIL: $*" >&2; exit 1; }

# the tracked files alone, as a fresh clone holds them
mkdir -p "$work/src"
(cd "$src" && git ls-files -z | xargs -0 cp --parents -t "$work/src/")
"$py" -m venv "$work/v"
"$work/v/bin/pip" install -q --upgrade pip >/dev/null 2>&1
"$work/v/bin/pip" wheel -q --no-deps -w "$work/dist" "$work/src" >/dev/null
"$work/v/bin/pip" install -q "$work"/dist/inferdeck-*.whl >"$work/pip.log" 2>&1 ||
  { grep -v "^WARNING: Location" "$work/pip.log" >&2; fail "pip install of the wheel failed"; }
id="$work/v/bin/inferdeck"
empty=$(mktemp -d -p "$work")
cd "$empty"
export XDG_STATE_HOME="$work/state" HOME="$work/home"
mkdir -p "$HOME"

where=$("$work/v/bin/python" -c 'import console, screens, config; print(console.__file__)')
case "$where" in "$work/v/"*) ;; *) fail "console imported from $where, not the venv";; esac

run() {  # run NAME EXPECTED_CODES CMD...: no traceback, exit code among EXPECTED_CODES
  local name=$1 codes=$2; shift 2
  local rc=0
  "$@" >"$work/out" 2>&1 || rc=$?
  if grep -q "Traceback" "$work/out"; then cat "$work/out" >&2; fail "$name printed a traceback"; fi
  case " $codes " in *" $rc "*) ;; *) cat "$work/out" >&2; fail "$name exited $rc (expected $codes)";; esac
  echo "ok   $name (exit $rc)"
}
port=$("$work/v/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

run "--help" 0 "$id" --help
run "--version" 0 "$id" --version
run "example-config" 0 "$id" example-config
"$id" example-config > "$work/example.yaml"
run "schema config" 0 "$id" schema config
run "schema frame" 0 "$id" schema frame
"$id" schema frame | "$work/v/bin/python" -c 'import json, sys; d = json.load(sys.stdin); sys.exit(0 if "Engine" in d["$defs"] else "schema frame: no Engine record")' ||
  fail "schema frame is not the Frame's JSON Schema"
run "plan --config example" "0 1" env SGLANG_TOKEN=example "$id" plan --config "$work/example.yaml"
run "plan --demo" "0 1" "$id" plan --demo
run "snapshot --demo" 0 "$id" snapshot --demo --wait 1
grep -q '"schema": "inferdeck.frame/1"' "$work/out" || fail "snapshot --demo printed no Frame"
run "snapshot --demo md" 0 "$id" snapshot --demo --wait 1 --format md
run "snapshot --demo --out" 0 "$id" snapshot --demo --wait 1 --out "$work/bundles" --note ci
run "check --demo" "0 1 2" "$id" check --demo --wait 1
run "mig show --demo" 0 "$id" mig show --demo
run "mig layouts --demo" 0 "$id" mig layouts 1 --demo
run "check --demo --format json" "0 1 2" "$id" check --demo --wait 1 --format json
for kind in check mig-show plan timeline; do run "schema $kind" 0 "$id" schema "$kind"; done
run "completion bash" 0 "$id" completion bash
run "completion bash loads" 0 bash --norc -c "source <('$id' completion bash) && complete -p inferdeck"
run "completion fish" 0 "$id" completion fish
run "man" 0 "$id" man
run "dashboards --out" 0 "$id" dashboards --out "$work/dashboards"
ls "$work"/dashboards/inferdeck-engine-vllm.json >/dev/null || fail "dashboards wrote no vLLM dashboard"
run "dashboards --format perses without the package" 2 "$id" dashboards --format perses
grep -q "pip install 'inferdeck\[perses\]'" "$work/out" || fail "--format perses did not say what to install"
# the OpenTelemetry SDK is an extra: without it --otlp says what to install, in one sentence
run "export --otlp without the SDK" 2 "$id" export --demo --otlp http://127.0.0.1:9 --duration 1
grep -q "pip install 'inferdeck\[otlp\]'" "$work/out" || fail "export --otlp did not say what to install"
run "export --otlp-protocol grpc without the SDK" 2 "$id" export --demo --otlp http://127.0.0.1:9 --otlp-protocol grpc --duration 1
grep -q "pip install 'inferdeck\[otlp-grpc\]'" "$work/out" || fail "--otlp-protocol grpc did not say what to install"
run "rules" 0 "$id" rules
run "rules --demo" 0 "$id" rules --demo
run "rules --alertmanager" 0 "$id" rules --alertmanager
run "export --demo" 0 "$id" export --demo --duration 3 --listen "127.0.0.1:$port"
run "record --demo" 0 "$id" record --demo --duration 3 --out "$work/rec"
rec=$(ls "$work"/rec/*.idrec.gz | head -1)
run "replay --help" 0 "$id" replay --help
run "recording reads back" 0 "$work/v/bin/python" -c \
  "import sys; from pathlib import Path; from console.read.recording import read; h, s = read(Path(sys.argv[1])); assert s, 'no frames'" "$rec"
run "simulate" "0 124" timeout 3 "$id" simulate --engine vllm --port 0
grep -q "serving http://127.0.0.1:" "$work/out" || fail "simulate did not say where it serves"
run "--demo with --prometheus refused" 2 "$id" check --demo --prometheus http://127.0.0.1:9
# the console itself, in a pseudo-terminal for a few seconds (its stylesheet comes from the wheel),
# and the replay of the recording
for what in demo "replay $rec"; do
  run "$what (TUI)" 0 "$work/v/bin/python" - $what <<'PY'
import fcntl, os, pty, select, signal, struct, sys, termios, time
pid, fd = pty.fork()
if pid == 0:
    os.environ["TERM"] = "xterm-256color"
    os.execv(os.path.join(os.path.dirname(sys.executable), "inferdeck"), ["inferdeck", *sys.argv[1:]])
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
out, end = b"", time.monotonic() + 6
while time.monotonic() < end:
    if select.select([fd], [], [], 0.2)[0]:
        try:
            out += os.read(fd, 65536)
        except OSError:
            break
os.kill(pid, signal.SIGTERM)
_, status = os.waitpid(pid, 0)
text = out.decode("utf-8", "replace")
if "Traceback" in text or b"inferdeck" not in out:
    sys.exit(f"the console did not start cleanly:\n{text[-3000:]}")
PY
done
echo "installed.sh: every command ran from the installed wheel"
