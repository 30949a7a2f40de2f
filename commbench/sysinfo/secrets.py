"""Which environment variables are never recorded: those whose name looks like a credential and
those whose value has the shape of one (docs/results.md, "What is withheld").

By name: TOKEN, SECRET, PASSWORD, KEY, AUTH, ... anywhere in it, PASS/PWD/CRED where a word
starts, PW/PWD where a word ends. By value: an Authorization header or a bearer/basic credential,
a URL with user:password@, a key=value pair whose key names a credential, a JWT, an access-key
id (AKIA...), a known token shape (ghp_, glpat-, xoxb-, sk-, hf_, AIza, ...), a PEM block, and a
long random-looking word (20+ characters of base64 or 32+ of hex with a high entropy) that is not
a GPU UUID, a path or a number. A site adds its own names (COMMBENCH_WITHHOLD_NAMES: names or
shell patterns, comma separated) and value patterns (COMMBENCH_WITHHOLD_PATTERNS: one regular
expression, searched in every value)."""
from __future__ import annotations

import base64
import binascii
import fnmatch
import math
import os
import re
from collections import Counter
from functools import lru_cache
from typing import Mapping

from ..errors import CommbenchError, preview

WITHHELD = "<withheld>"
NAMES_VAR = "COMMBENCH_WITHHOLD_NAMES"
PATTERNS_VAR = "COMMBENCH_WITHHOLD_PATTERNS"

# A name that looks like a credential is never recorded, whatever its prefix (TORCH_HUB_TOKEN,
# NCCL_PASSPHRASE, OMPI_MCA_pwd, CUDA_SHORTPW): these words anywhere, PASS/PWD/CRED where a word
# starts, PW/PWD where one ends.
CREDENTIAL_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|KEY|CREDENTIAL|AUTH|BEARER|PRIVATE|COOKIE|SESSION|JWT"
                             r"|(?<![A-Za-z0-9])(?:PASS|PWD|CREDS?(?![A-Za-z0-9]))|PWD?(?![A-Za-z0-9])",
                             re.IGNORECASE)
# Values with a credential's shape, found anywhere in the value.
_SHAPES = re.compile("|".join((
    r"authorization\s*[:=]",                                              # an HTTP header
    r"\b(?:bearer|token|negotiate)\s+[A-Za-z0-9._~+/-]{8,}=*",            # Bearer <credential>
    r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@",                     # scheme://user:password@
    r"(?:^|[?&;,\s])[A-Za-z0-9_.-]*(?:token|secret|passw(?:or)?d|pwd|api[_-]?key|access[_-]?key|signature|sig)"
    r"\s*[=:]\s*[^\s&;,]+",                                               # ?token=..., password=...
    r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",           # a JWT (its header is base64 '{"')
    r"(?<![A-Z0-9])(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Z0-9])",  # key ids
    r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|glpat-[A-Za-z0-9_-]{20,}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}|sk-[A-Za-z0-9_-]{20,}|[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"
    r"|hf_[A-Za-z0-9]{30,}|AIza[A-Za-z0-9_-]{35}|npm_[A-Za-z0-9]{36}|ya29\.[A-Za-z0-9_-]{20,})",  # tokens
    r"-----BEGIN [A-Z0-9 ]+-----",                                        # a PEM block
)), re.IGNORECASE)
_BASIC = re.compile(r"\bbasic\s+([A-Za-z0-9+/]{4,}={0,2})", re.IGNORECASE)
# A word in these alphabets (base64, base64url, hex) that is long and varied enough reads as a key.
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9+/=_-]{20,}")
_HEX = re.compile(r"[0-9a-fA-F]+")
# GPU and MIG UUIDs (CUDA_VISIBLE_DEVICES) are long hex but name hardware, not secrets.
_UUID = re.compile(r"(?:(?:GPU|MIG)-)+[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}(?:/\d+)*"
                   r"|[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")
_WORDS = re.compile(r"[\s,;:=\"'&?@()\[\]{}<>|]+")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _entropy_bits(text: str) -> float:
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values())


def _random_word(word: str) -> bool:
    """20+ characters of base64/hex varied like a random key; not a UUID, a path or a number."""
    if not _TOKEN_CHARS.fullmatch(word) or _UUID.fullmatch(word) or word.startswith(("/", "./", "~")) \
            or _NUMBER.fullmatch(word):
        return False
    if all(_plain(piece) for piece in re.split(r"[-_./]+", word)):   # a stamp, a name, words: not random
        return False
    if _HEX.fullmatch(word):   # hex: 16 symbols at most, so judged on a longer string
        return len(word) >= 32 and _entropy_bits(word) >= 3.0
    classes = sum(bool(re.search(p, word)) for p in ("[a-z]", "[A-Z]", "[0-9]"))
    return classes == 3 and _entropy_bits(word) >= 3.5


def _plain(piece: str) -> bool:
    """A piece of a word that reads as written by a person: a UTC stamp (20250101T120000Z), or at
    most two changes between lower-case, upper-case and digits (quickstart, h100, v2, NCCL)."""
    if re.fullmatch(r"\d{8}T\d{6}Z?", piece):
        return True
    kinds = ["a" if c.islower() else "A" if c.isupper() else "0" for c in piece]
    return sum(a != b for a, b in zip(kinds, kinds[1:])) <= 2


def _basic_credential(text: str) -> bool:
    """``Basic <base64 of user:password>``."""
    for m in _BASIC.finditer(text):
        try:
            if b":" in base64.b64decode(m.group(1) + "=" * (-len(m.group(1)) % 4), validate=True):
                return True
        except (binascii.Error, ValueError):
            continue
    return False


def looks_secret(value) -> bool:
    """A value with a credential's shape (module docstring), or one the site's pattern matches."""
    text = str(value).strip()
    if not text:
        return False
    if _SHAPES.search(text) or _basic_credential(text) or _site_pattern_hit(text):
        return True
    if _random_word(text):
        return True
    if text.startswith(("/", "~")) or _NUMBER.fullmatch(text):
        return False   # a path (or a list of paths) or a number
    return any(_random_word(w) for w in _WORDS.split(text) if w)


def is_secret(name, value=None) -> bool:
    """A variable never recorded: its name looks like a credential (or the site names it), or its
    value has the shape of one."""
    name = str(name)
    return bool(CREDENTIAL_NAME.search(name)) or _site_name_hit(name) or name == PATTERNS_VAR \
        or (value is not None and looks_secret(value))


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the value of every secret-looking variable replaced by ``<withheld>``."""
    return {k: (WITHHELD if is_secret(k, v) else v) for k, v in env.items()}


def _site_name_hit(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name.upper(), p.upper()) for p in _site_names(os.environ.get(NAMES_VAR, "")))


def _site_pattern_hit(text: str) -> bool:
    pattern = _site_pattern(os.environ.get(PATTERNS_VAR, ""))
    return bool(pattern and pattern.search(text))


@lru_cache(maxsize=8)
def _site_names(raw: str) -> tuple[str, ...]:
    return tuple(p for p in re.split(r"[\s,]+", raw) if p)


@lru_cache(maxsize=8)
def _site_pattern(raw: str) -> re.Pattern | None:
    if not raw.strip():
        return None
    try:
        return re.compile(raw)
    except re.error as exc:
        raise CommbenchError(f"{PATTERNS_VAR} is not a regular expression ({exc}; its value is not shown, "
                             f"it may spell a secret): set it to one Python regular expression (join several "
                             f"with |), or unset it") from None


def check_site_settings() -> None:
    """Exit 2 (CommbenchError naming the variable) when the site's withholding settings are unusable."""
    _site_pattern(os.environ.get(PATTERNS_VAR, ""))
    bad = [p for p in _site_names(os.environ.get(NAMES_VAR, "")) if not re.fullmatch(r"[A-Za-z0-9_*?\[\]!-]+", p)]
    if bad:
        raise CommbenchError(f"{NAMES_VAR}: {preview(bad[0], 40)} is not a variable name or a shell pattern of one "
                             f"(letters, digits, _, * and ?); separate names with commas")
