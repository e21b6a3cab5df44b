"""Registry credentials, found where docker and podman keep them (never in a recipe, a lock or a URL).

In order: TOOLCHAIN_REGISTRY_USERNAME + TOOLCHAIN_REGISTRY_PASSWORD; $REGISTRY_AUTH_FILE;
${XDG_RUNTIME_DIR}/containers/auth.json and ~/.config/containers/auth.json (`podman login`);
$DOCKER_CONFIG/config.json or ~/.docker/config.json (`docker login`), including its `credHelpers` and
`credsStore` (`docker-credential-NAME get`). In an auth file the most specific key wins
(`host/namespace/wheels`, `host/namespace`, `host`, `https://host`).

A `Credentials` never shows its password (repr, str); messages name only the user and where it was found.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolchain.core.record import field, record

ENV_USERNAME, ENV_PASSWORD = "TOOLCHAIN_REGISTRY_USERNAME", "TOOLCHAIN_REGISTRY_PASSWORD"
HELPER_TIMEOUT = 10.0


@record
class Credentials:
    """A registry user name and password, and where they were found (the password never in a repr)."""
    username: str
    password: str = field(repr=False)
    source: str = ""  # where they were found: a file, or the environment variables

    def __str__(self) -> str:
        return f"user {self.username!r} (from {self.source})"

    def basic_authorization(self) -> str:
        """The `Authorization` header's value for HTTP Basic auth (RFC 7617), encoded as requests encodes it."""
        pair = f"{self.username}:{self.password}".encode("latin1")
        return "Basic " + base64.b64encode(pair).decode("ascii")


def auth_files(env: Mapping[str, str]) -> list[Path]:
    """The container auth files to look in, in the order podman and docker read them."""
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    files = []
    if env.get("REGISTRY_AUTH_FILE"):
        files.append(Path(env["REGISTRY_AUTH_FILE"]))
    if env.get("XDG_RUNTIME_DIR"):
        files.append(Path(env["XDG_RUNTIME_DIR"]) / "containers" / "auth.json")
    files.append(Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "containers" / "auth.json")
    files.append(Path(env["DOCKER_CONFIG"]) / "config.json" if env.get("DOCKER_CONFIG")
                 else home / ".docker" / "config.json")
    return files


def find_credentials(host: str, repository: str, env: Mapping[str, str] | None = None) -> Credentials | None:
    """Credentials for `host` (host[:port]) and `repository` (namespace/wheels), or None (anonymous)."""
    env = os.environ if env is None else env
    user, password = env.get(ENV_USERNAME), env.get(ENV_PASSWORD)
    if user and password:
        return Credentials(user, password, f"${ENV_USERNAME}/${ENV_PASSWORD}")
    keys = _keys(host, repository)
    for path in auth_files(env):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict):
            continue
        found = _from_auths(doc.get("auths"), keys, str(path)) or _from_helpers(doc, host, str(path))
        if found is not None:
            return found
    return None


def _keys(host: str, repository: str) -> list[str]:
    parts = repository.split("/")
    scoped = [f"{host}/{'/'.join(parts[:i])}" for i in range(len(parts), 0, -1)]
    return [*scoped, host, f"https://{host}", f"http://{host}", f"https://{host}/v1/", f"https://{host}/v2/"]


def _from_auths(auths: object, keys: list[str], source: str) -> Credentials | None:
    if not isinstance(auths, dict):
        return None
    for key in keys:
        entry = auths.get(key)
        if not isinstance(entry, dict):
            continue
        if isinstance(entry.get("auth"), str) and entry["auth"]:
            try:
                user, _, password = base64.b64decode(entry["auth"]).decode("utf-8").partition(":")
            except (binascii.Error, UnicodeDecodeError, ValueError):
                continue
            if user and password:
                return Credentials(user, password, source)
        if isinstance(entry.get("username"), str) and isinstance(entry.get("password"), str):
            return Credentials(entry["username"], entry["password"], source)
    return None


def _from_helpers(doc: dict[str, Any], host: str, source: str) -> Credentials | None:
    helpers = doc.get("credHelpers")
    helper = (helpers.get(host) if isinstance(helpers, dict) else None) or doc.get("credsStore")
    if not isinstance(helper, str) or not helper:
        return None
    from toolchain.core.proc.runner import run
    from toolchain.errors import ToolError

    program = f"docker-credential-{helper}"
    try:  # captured, never logged: its stdout holds the secret
        done = run([program, "get"], capture=True, check=False, stdin=host.encode(), timeout=HELPER_TIMEOUT)
    except (ToolError, OSError):
        return None
    if done.returncode != 0:
        return None
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        return None
    if not isinstance(answer, dict):  # a helper answering a list, a string, a number: no credentials
        return None
    user, secret = answer.get("Username"), answer.get("Secret")
    if isinstance(user, str) and isinstance(secret, str) and user and secret and user != "<token>":
        return Credentials(user, secret, f"{source} ({program})")
    return None
