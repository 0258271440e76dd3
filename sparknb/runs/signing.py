"""Signing a run's manifest with an SSH key, the way git signs commits (`ssh-keygen -Y sign`/`-Y verify`).

A manifest alone is a list of hashes that anyone can rewrite: a record changed and its sha256 rewritten in
manifest.json verified as intact. Signed, a rewritten manifest fails its signature, and one signed again
names the key that signed it. The key is $SPARKNB_SIGNING_KEY (any SSH key, e.g. the one git signs with),
or sparknb's own Ed25519 key, made on first use in the config folder; the keys a reader trusts, by name,
are that folder's allowed_signers (ssh-keygen's format). sparknb lists there its own key, under this box's name,
and any other key only by `sparknb trust KEY --as NAME`: a key that $SPARKNB_SIGNING_KEY named once was listed
for good under this box's own name, so anything it signed later verified as this box's own run.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import logging
import os
import re
import shutil
import socket
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import RunError

NAMESPACE = "sparknb-run"  # a signature made for a run is refused as a git commit's or an email's, and back
KEY_ENV = "SPARKNB_SIGNING_KEY"
CONFIG_ENV = "SPARKNB_CONFIG_DIR"
TIMEOUT_S = 30  # ssh-keygen answers in milliseconds; a key that asks for a passphrase has no terminal here
log = logging.getLogger(__name__)


def config_dir() -> Path:
    """$SPARKNB_CONFIG_DIR, or sparknb's folder under $XDG_CONFIG_HOME (~/.config)."""
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV])
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "sparknb"


def allowed_signers() -> Path:
    return config_dir() / "allowed_signers"


def whoami() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"


class NoKeygen(RunError):
    """No ssh-keygen on this box: nothing can be signed or checked here, which says nothing of the seal itself."""


def _ssh_keygen(*args: str, data: bytes = b"") -> subprocess.CompletedProcess:
    """ssh-keygen without a terminal (a passphrase prompt fails at once instead of waiting) and with a bound."""
    try:
        return subprocess.run(["ssh-keygen", *args], input=data, capture_output=True, timeout=TIMEOUT_S,
                              start_new_session=True)
    except FileNotFoundError:
        raise NoKeygen("ssh-keygen is not installed (it signs and checks seals): install openssh-client") from None
    except subprocess.TimeoutExpired:
        raise RunError(f"ssh-keygen {args[0]} {args[1]} gave no answer in {TIMEOUT_S} s") from None


def absent() -> str | None:
    """Said once in a run's first lines where ssh-keygen is missing (as on a bare GPU machine), rather than only as
    each comparison's warning that a run is UNSIGNED; None where it is installed."""
    if shutil.which("ssh-keygen"):
        return None
    return ("NO SSH-KEYGEN: this run will be sealed UNSIGNED (its files hashed, nothing vouching for the hashes). "
            "Install openssh-client (apt-get install -y openssh-client) to sign runs.")


def key() -> Path:
    """The signing key: $SPARKNB_SIGNING_KEY, or sparknb's own, made now if this is its first use."""
    if os.environ.get(KEY_ENV):
        path = Path(os.environ[KEY_ENV]).expanduser()
        if not path.is_file():
            raise RunError(f"{KEY_ENV} names {path}, which is no file: give the path of an SSH private key "
                           "(or of the public key of one held by ssh-agent)")
        return path
    path = config_dir() / "signing_key"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        made = _ssh_keygen("-q", "-t", "ed25519", "-N", "", "-C", whoami(), "-f", str(path))
        if made.returncode != 0:
            raise RunError(f"could not make a signing key at {path}: {made.stderr.decode().strip()}")
        log.warning("made a signing key for sealed runs: %s (its public half: %s.pub); set %s to sign with "
                    "another", path, path, KEY_ENV)
    return path


def _public(path: Path) -> str:
    """'ssh-ed25519 AAAA...' of a key, from its .pub beside it (or the key itself, given as a .pub)."""
    pub = _pub_file(path)
    if pub.is_file():
        return " ".join(pub.read_text().split()[:2])
    derived = _ssh_keygen("-y", "-f", str(path))
    if derived.returncode != 0:
        raise RunError(f"could not read the public half of {path}: {derived.stderr.decode().strip()}")
    return " ".join(derived.stdout.decode().split()[:2])


def _listed(public: str) -> str | None:
    """The name allowed_signers lists this key under, or None."""
    path = allowed_signers()
    for line in path.read_text().splitlines() if path.is_file() else []:
        if public.split()[1] in line.split():
            return line.split()[0]
    return None


def _list(name: str, public: str) -> None:
    path = allowed_signers()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(f'{name} namespaces="{NAMESPACE}" {public}\n')


def own_key() -> str | None:
    """'ssh-ed25519 AAAA...' of sparknb's own key on this box, or None before it is made."""
    pub = config_dir() / "signing_key.pub"
    return " ".join(pub.read_text().split()[:2]) if pub.is_file() else None


def trust(given: str, name: str) -> str:
    """List another key in allowed_signers under `name`, so that runs it signs verify as intact, signed by `name`.
    `given` is a public key ('ssh-ed25519 AAAA...') or the file holding one. Never under this box's own name (a
    run signed by another key must never pass for this box's own), never a second name for a listed key."""
    public = parse_public(Path(given).expanduser().read_text() if Path(given).expanduser().is_file() else given)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._@+-]*", name or ""):
        raise RunError(f"--as {name!r}: a name is letters, digits and . _ @ + - (no spaces, commas or wildcards)")
    if name == whoami():
        raise RunError(f"--as {name}: that is this box's own name, kept for this box's own key; give the key's "
                       "holder's name")
    listed = _listed(public)
    if listed:
        raise RunError(f"{fingerprint(public)} is trusted already, as {listed} ({allowed_signers()})")
    _list(name, public)
    return fingerprint(public)


def parse_public(text: str) -> str:
    """'TYPE BASE64' of an SSH public key as given (a .pub line, or the key itself); refused when it is none."""
    parts = text.split()
    try:
        blob = base64.b64decode(parts[1], validate=True)
        (size,) = struct.unpack(">I", blob[:4])
        if blob[4:4 + size].decode() != parts[0]:
            raise ValueError(parts[0])
    except (IndexError, ValueError, struct.error, UnicodeDecodeError):
        raise RunError(f"{text.strip()[:60]!r} is no SSH public key: give 'ssh-ed25519 AAAA...' or a .pub file "
                       "(the line `sparknb verify` prints for the run)") from None
    return f"{parts[0]} {parts[1]}"


def fingerprint(public: str) -> str:
    """SHA256:... of 'ssh-ed25519 AAAA...', as ssh-keygen -l prints it."""
    blob = base64.b64decode(public.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def signer() -> tuple[Path, str]:
    """The signing key and its public half. sparknb's own key is listed under this box's name; a key that
    $SPARKNB_SIGNING_KEY names is never listed by signing (it says how to trust it by name)."""
    path = key()
    public = _public(path)
    if os.environ.get(KEY_ENV):
        if _listed(public) is None:
            log.warning("signing with %s, which %s does not list: its runs verify as UNKNOWN SIGNER here until "
                        "`sparknb trust %s --as NAME`", path, allowed_signers(), _pub_file(path))
    elif _listed(public) is None:
        _list(whoami(), public)
    return path, public


def _pub_file(path: Path) -> Path:
    return path if path.suffix == ".pub" else path.with_name(path.name + ".pub")


def sign(data: bytes, path: Path) -> str:
    """The armoured SSH signature of `data` by the key at `path`."""
    signed = _ssh_keygen("-Y", "sign", "-n", NAMESPACE, "-f", str(path), data=data)
    if signed.returncode != 0:
        raise RunError(f"ssh-keygen could not sign with {path}: {signed.stderr.decode().strip()} (a key with a "
                       f"passphrase must be in ssh-agent; or unset {KEY_ENV} to use sparknb's own key)")
    return signed.stdout.decode()


@dataclass(frozen=True)
class Signature:
    """What a signature says: whether it holds for the data, by which key, and whose that key is here."""

    good: bool
    key: str  # SHA256:... of the key that signed
    public: str  # 'ssh-ed25519 AAAA...', to be added to allowed_signers by a reader who trusts it
    signer: str | None  # its name in allowed_signers; None for a key not listed there
    detail: str = ""


def check(data: bytes, signature: Path) -> Signature:
    """Whether `signature` (a file) signs `data` in sparknb's namespace, and whose key made it."""
    public = _signing_key(signature.read_text())
    listed = allowed_signers()
    found = _ssh_keygen("-Y", "find-principals", "-s", str(signature), "-f", str(listed)) if listed.is_file() else None
    name = found.stdout.decode().split()[0] if found is not None and found.returncode == 0 else None
    if name == whoami() and public != own_key():  # listed under this box's name by an older sparknb, not its key
        name = None
    how = ("-Y", "verify", "-f", str(listed), "-I", name) if name else ("-Y", "check-novalidate")
    checked = _ssh_keygen(*how, "-n", NAMESPACE, "-s", str(signature), data=data)
    return Signature(checked.returncode == 0, fingerprint(public), public, name,
                     (checked.stderr or checked.stdout).decode().strip())


def _signing_key(armoured: str) -> str:
    """'ssh-ed25519 AAAA...' of the key inside an SSH signature (PROTOCOL.sshsig: magic, version, key, ...)."""
    try:
        body = base64.b64decode("".join(line for line in armoured.splitlines() if not line.startswith("-----")))
        (size,) = struct.unpack(">I", body[10:14])
        blob = body[14:14 + size]
        (kind_size,) = struct.unpack(">I", blob[:4])
        if body[:6] != b"SSHSIG" or len(blob) != size:
            raise ValueError("no SSHSIG")
        return f"{blob[4:4 + kind_size].decode()} {base64.b64encode(blob).decode()}"
    except (ValueError, struct.error, UnicodeDecodeError):
        raise RunError("manifest.sig is not an SSH signature") from None
