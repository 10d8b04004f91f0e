"""The config file: where it is looked for, what it may say, and one-sentence errors.

Looked for, first found wins: ``--config``, ``$INFERDECK_CONFIG``,
``$XDG_CONFIG_HOME/inferdeck/config.yaml`` (``~/.config/...``), ``/etc/inferdeck/config.yaml``.
Never the current directory. Unknown keys are errors. Tokens are read from an environment
variable or a file named in the config, never written into it, and never into snapshots or logs.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any, Self

from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator

from console.engines import add_profiles, kinds
from console.figures.plan import Plan, check_plan
from console.figures.windowed import parse_window
from console.promtext import MAX_LABEL_CHARS, MAX_SERIES
from console.read.scraper import UrlError, check_url, split_query_secrets, without_credentials
from console.records import Invalid, UserFile
from console.sample import ConfigChange
from console.yamlfile import ConfigError, config_error, load_yaml


class _HasUrl(UserFile):
    url: str
    # user:password from the URL, moved out where it enters: never dumped, never in a name, never
    # read from the file; and the URL as fetched when its query holds a secret (the url masks it)
    _auth: dict[str, str] | None = PrivateAttr(None)
    _fetch: str | None = PrivateAttr(None)

    @property
    def url_auth(self) -> dict[str, str] | None:
        return self._auth

    @property
    def url_fetch(self) -> str | None:
        return self._fetch

    @model_validator(mode="after")
    def _credentials_out(self) -> Self:
        clean, auth = without_credentials(self.url)
        if auth is not None:
            self.url, self._auth = clean, auth
        shown, fetch = split_query_secrets(self.url)
        if fetch is not None:
            self.url, self._fetch = shown, fetch
        return self

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        try:
            return check_url(v)
        except UrlError as exc:
            raise ValueError(str(exc).rstrip(".")) from None


class EngineConfig(_HasUrl):
    name: str | None = None
    kind: str | None = None  # one of the profiles in config/engines.yaml

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str | None) -> str | None:
        if v is not None and v not in kinds():
            raise ValueError(f"unknown engine kind {v!r}; use one of {', '.join(kinds())}")
        return v

    token_env: str | None = None
    token_file: str | None = None
    verify_tls: bool = True
    timeout_s: float = Field(2.0, gt=0, le=120)
    interval_s: float | None = Field(None, gt=0)
    device: str | None = None
    model: str | None = None
    # labels that pick this engine's series in Prometheus, for `inferdeck rules --slo` (default:
    # instance = the URL's host:port, as a static target is labelled; under Kubernetes e.g.
    # {namespace: ai, pod: chat-0})
    prometheus_labels: dict[str, str] | None = None
    top_models: list[str] | None = (
        None  # Triton: the models clients call (ensembles), not their steps
    )
    api_url: str | None = None  # Triton's HTTP API, for its ensemble structure (default: port 8000)

    @model_validator(mode="after")
    def _one_token(self) -> Self:
        if self.token_env and self.token_file:
            raise ValueError("give token_env or token_file, not both")
        return self


class PrometheusConfig(_HasUrl):
    """The fleet view's Prometheus: URL, bearer token or basic auth from env/file, TLS verify."""

    token_env: str | None = None
    token_file: str | None = None
    username: str | None = None
    password_env: str | None = None
    verify_tls: bool = True
    tenant: str | None = None  # X-Scope-OrgID, for Mimir, Cortex, Thanos receive
    timeout_s: float = Field(10.0, gt=0)  # one query's time limit
    concurrency: int = Field(4, gt=0)  # queries at once (VictoriaMetrics' default limit is 4/CPU)


class KubeletConfig(_HasUrl):
    """The node's kubelet, for pod names behind GPU processes: its /pods endpoint (usually
    https://127.0.0.1:10250/pods) with a bearer token (a service account's); TLS verified."""

    token_env: str | None = None
    token_file: str | None = None  # read at every fetch: projected tokens rotate
    ca_file: str | None = None  # the kubelet's serving CA, when not in the system store
    verify_tls: bool = True


class ScrapeLimits(UserFile):
    """What one engine page may cost (a page over a limit is refused with the limit named)."""

    max_series: int = Field(MAX_SERIES, gt=0)
    max_label_chars: int = Field(MAX_LABEL_CHARS, gt=0)


class Settings(Plan):
    """The whole config file: how to watch (window, engines, discovery) and the plan."""

    window: str = "1m"
    interval_s: float = Field(1.0, gt=0)
    snapshot_dir: str | None = None  # default $XDG_STATE_HOME/inferdeck/snapshots
    engine_profiles: str | None = (
        None  # an engines file of the operator's (config/engines.yaml's shape)
    )
    discover: bool = True
    scrape: ScrapeLimits = Field(default_factory=ScrapeLimits)
    engines: list[EngineConfig] = Field(default_factory=list)
    prometheus: PrometheusConfig | None = None
    kubelet: KubeletConfig | None = None
    node_plans: dict[str, str] = Field(
        default_factory=dict
    )  # fleet: node name -> that node's config file
    _file: Path | None = PrivateAttr(None)  # the file it was read from
    _at_start: dict[str, Any] = PrivateAttr(default_factory=dict)  # as read (before flags)

    def plan_json(self) -> dict[str, Any]:
        """The plan part alone (what a running console takes from the file again)."""
        return self.model_dump(mode="json", include=set(Plan.model_fields))

    def watched(self) -> dict[str, Any]:
        """What a running console takes from the file only at its start."""
        return self.model_dump(mode="json", include=set(AT_START))

    @field_validator("window")
    @classmethod
    def _window(cls, v: str) -> str:
        try:
            parse_window(v)
        except (ValueError, KeyError, IndexError):
            raise ValueError("use a duration like 1m, 5m, 15m or 1h") from None
        return v

    @property
    def window_s(self) -> float:
        return parse_window(self.window)


# read once, at start: the engines polled, how and how often, and where (the plan is read again)
AT_START = (
    "window",
    "interval_s",
    "engines",
    "discover",
    "scrape",
    "prometheus",
    "kubelet",
    "engine_profiles",
    "snapshot_dir",
    "node_plans",
)


_STEADY = object()  # the file as last read: nothing settling


class ConfigWatch:
    """The config file a running console was started with, read again when it changes on disk
    (one stat a poll; read once it has stood unchanged for a poll, so a file caught half-written
    is not read). ``check`` says what the change is: the new plan (and which keys wait for a
    restart), or the one sentence why the file cannot be read; the plan read before stays."""

    def __init__(self, settings: Settings) -> None:
        assert settings._file is not None
        self.path = settings._file
        self.plan = settings.plan_json()
        self.at_start = self.watched = settings._at_start
        self.seen = self._stamp()
        self.settling: object = _STEADY  # the stamp seen changed at the last check

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def check(self) -> ConfigChange | None:
        stamp = self._stamp()
        if stamp == self.seen:
            self.settling = _STEADY
            return None
        if stamp != self.settling:
            self.settling = stamp  # read at the next poll, if it still stands
            return None
        self.seen, self.settling = stamp, _STEADY
        where = str(self.path)
        if stamp is None:
            return ConfigChange(
                path=where,
                error=f"{where}: the config file is gone; the plan read before stays in force.",
            )
        try:
            new = load_settings(self.path, reload=True)
        except ConfigError as exc:
            return ConfigChange(path=where, error=str(exc))
        plan, watched = new.plan_json(), new.watched()
        later = [k for k in AT_START if watched.get(k) != self.at_start.get(k)]
        if plan == self.plan and watched == self.watched:
            return None  # saved again, nothing changed
        self.plan, self.watched = plan, watched
        return ConfigChange(path=where, plan=plan, at_restart=later)


def config_path(explicit: str | None = None) -> Path | None:
    """The config file to read, or None. An explicit path that does not exist is an error."""
    if explicit:
        p = Path(explicit).expanduser()
        if not p.is_file():
            raise ConfigError(f"{p}: no such config file; check the path given to --config.")
        return p
    env = os.environ.get("INFERDECK_CONFIG")
    if env:
        p = Path(env).expanduser()
        if not p.is_file():
            raise ConfigError(
                f"{p}: no such config file (from $INFERDECK_CONFIG); fix or unset the variable."
            )
        return p
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    for p in (xdg / "inferdeck" / "config.yaml", Path("/etc/inferdeck/config.yaml")):
        if p.is_file():
            return p
    return None


def load_settings(path: Path | None, reload: bool = False) -> Settings:
    """The config file read and checked (``reload``: read again by a running console, whose
    engine profiles stay as they were loaded at its start)."""
    if path is None:
        return Settings()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot read it ({exc.strerror}); check its permissions."
        ) from None
    data, where = load_yaml(text, str(path))
    if data is None:
        return Settings()
    if not isinstance(data, dict):
        raise ConfigError(
            f"{where(())}: the config must be a mapping of keys (window, engines, ...)."
        )
    user_profiles = data.get("engine_profiles")
    if isinstance(user_profiles, str) and not reload:  # before the engines, whose kinds it may name
        add_profiles((path.parent / Path(user_profiles).expanduser()).resolve())
    try:
        settings = Settings.model_validate(data)
    except ValidationError as exc:
        raise config_error(Invalid.of(exc), where) from None
    for i, eng in enumerate(settings.engines):
        token_headers(eng, lambda field, i=i: where(("engines", i, field)))
    check_plan(settings, where)
    settings._file, settings._at_start = path, settings.watched()
    return settings


def demo_settings() -> Settings:
    """The demo node's config (its plan, SLOs and costs), shipped in config/demo.yaml."""
    text = resources.files("config").joinpath("demo.yaml").read_text(encoding="utf-8")
    data, where = load_yaml(text, "config/demo.yaml")
    try:
        settings = Settings.model_validate(data)
    except ValidationError as exc:
        raise config_error(Invalid.of(exc), where) from None
    check_plan(settings, where)
    return settings


def token_headers(
    eng: EngineConfig | PrometheusConfig, where: object = None
) -> dict[str, str] | None:
    """Authorization header from the token's env var or file (errors name the config line), else
    the user:password that came in the URL."""

    def at(field: str) -> str:
        return f"{where(field)}: " if callable(where) else ""

    token = None
    if eng.token_env:
        token = os.environ.get(eng.token_env)
        if not token:
            raise ConfigError(
                f"{at('token_env')}engines: environment variable {eng.token_env} is not set; "
                "export it or use token_file."
            )
    elif eng.token_file:
        try:
            token = Path(eng.token_file).expanduser().read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(
                f"{at('token_file')}engines: cannot read token file {eng.token_file} "
                f"({exc.strerror}); check the path and its permissions."
            ) from None
        if not token:
            raise ConfigError(f"{at('token_file')}engines: token file {eng.token_file} is empty.")
    if token:
        return {"Authorization": f"Bearer {token}"}
    username = getattr(eng, "username", None)
    if username:
        import base64

        password = os.environ.get(getattr(eng, "password_env", None) or "", "")
        if not password:
            raise ConfigError(
                f"{at('password_env')}prometheus: set password_env to an environment variable "
                "holding the password for basic auth."
            )
        pair = base64.b64encode(f"{username}:{password}".encode()).decode()
        return {"Authorization": f"Basic {pair}"}
    return eng.url_auth


__all__ = [
    "ConfigError",
    "EngineConfig",
    "Settings",
    "config_path",
    "load_settings",
    "token_headers",
]
