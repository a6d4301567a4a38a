"""Schemathesis hooks for scripts/api-fuzz: the rules that a schema cannot state.

`expiresAt` must lie in the future and after `notBefore` (JSON Schema has no "now"), so a
create whose valid date-times break that is moved forward in time just before it is sent (in
every phase, coverage included), instead of being reported as "schema-valid request rejected".
Values that are not valid date-times are left alone (they are what negative tests are about).

A `reconcile.url` is a URL template: the schema states its start (a scheme and a host), but
not that it must be a URL once its placeholders are filled in, nor the placeholders' rules
(`{fingerprint}` needs a fingerprint or an idempotency key). A template string that has the
right start is replaced by a valid one; strings with a wrong start and non-strings are left
alone. `reconcile.observationWindow` is a duration from 1s to 720h: a string is replaced by
`1h`. Both rules are tested directly in the daemon's own tests.

Header names are compared after trimming spaces and ignoring case, and two names that meet
there are refused (`a` and ` A ` are one header); JSON Schema cannot compare property names with
each other, so of such names only the first is kept, in `headers` and `reconcile.headers`. The
refusal itself is tested in the daemon's own tests.

Task types are the deployment's (the daemon's configuration file), not the schema's: the fuzzed
daemon declares one, `fuzz` (`/bin/true`, no parameters). A submission's `type` string becomes
`fuzz`, and a `params` object whose values are all strings becomes `{}`; anything else is left
for the negative tests.

A task's `idempotencyKey` and a delivery's `fingerprint` refuse control characters and Unicode's
invisible ones (categories Cc, Cf, Zl, Zp: U+200B, U+202E, U+2028 …). The schema says so in
words, not in a pattern (a character class of Unicode categories is not portable JSON Schema):
those characters are dropped from a schema-valid value, and one left blank by that becomes
`fuzz`. The refusals themselves are tested in the daemon's own tests.

Secrets are the deployment's too: the fuzzed daemon declares one, `fuzz`. A `sign.secretRef`
that is a valid name becomes `fuzz`; a malformed one is left for the negative tests. The
refusal of an undeclared name (`unknown_secret`) is tested in the daemon's own tests.
"""

import re
import unicodedata

from datetime import datetime, timedelta, timezone

import schemathesis


def _parse(value):
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else None


# The schema's pattern, with `\s` spelled out as ECMA-262 reads it (Python's `\s` also
# takes the control characters 0x1c-0x1f, which the schema allows there).
_ECMA_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_TEMPLATE_START = re.compile(r"^[Hh][Tt][Tt][Pp][Ss]?://[^/?#\\@:{}" + _ECMA_SPACE + "]")


def _fix_reconcile(body):
    reconcile = body.get("reconcile")
    if not isinstance(reconcile, dict):
        return
    url = reconcile.get("url")
    if isinstance(url, str) and _TEMPLATE_START.search(url):
        reconcile["url"] = "http://127.0.0.1:9/search?delivery={deliveryId}"
    if isinstance(reconcile.get("observationWindow"), str):
        reconcile["observationWindow"] = "1h"


def _dedupe_headers(holder):
    if not isinstance(holder, dict) or not isinstance(holder.get("headers"), dict):
        return
    seen = set()
    kept = {}
    for name, value in holder["headers"].items():
        canonical = name.strip(" ").lower()
        if canonical in seen:
            continue
        seen.add(canonical)
        kept[name] = value
    holder["headers"] = kept


_UNWANTED = {"Cc", "Cf", "Zl", "Zp"}
_NOT_BLANK = re.compile("[^" + _ECMA_SPACE + "]")


def _visible(value):
    return "".join(c for c in value if unicodedata.category(c) not in _UNWANTED)


def _fix_key(holder, name, max_length=None):
    value = holder.get(name)
    if not isinstance(value, str) or not _NOT_BLANK.search(value):
        return
    if max_length is not None and len(value) > max_length:
        return
    visible = _visible(value)
    holder[name] = visible if _NOT_BLANK.search(visible) else "fuzz"


def _fix_task(body):
    _fix_key(body, "idempotencyKey")
    if isinstance(body.get("type"), str):
        body["type"] = "fuzz"
    params = body.get("params")
    if isinstance(params, dict) and all(isinstance(v, str) for v in params.values()):
        body["params"] = {}


_SECRET_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _fix_sign(body):
    sign = body.get("sign")
    if isinstance(sign, dict) and isinstance(sign.get("secretRef"), str):
        if _SECRET_NAME.fullmatch(sign["secretRef"]):
            sign["secretRef"] = "fuzz"


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    body = case.body
    if not isinstance(body, dict):
        return
    if case.operation.path == "/v1/tasks":
        _fix_task(body)
        return
    _fix_key(body, "fingerprint", max_length=256)
    _fix_reconcile(body)
    _fix_sign(body)
    _dedupe_headers(body)
    _dedupe_headers(body.get("reconcile"))
    expires = _parse(body.get("expiresAt"))
    if expires is None:
        return
    now = datetime.now(timezone.utc)
    not_before = _parse(body.get("notBefore"))
    floor = max(now, not_before or now) + timedelta(days=1)
    if expires < floor:
        body["expiresAt"] = floor.isoformat().replace("+00:00", "Z")
