"""Schemathesis hooks for scripts/api-fuzz: the rules of time that a schema cannot state.

`expiresAt` must lie in the future and after `notBefore` (JSON Schema has no "now"), so a
create whose valid date-times break that is moved forward in time just before it is sent (in
every phase, coverage included), instead of being reported as "schema-valid request rejected".
Nothing else is changed, and values that are not valid date-times are left alone (they are
what negative tests are about).
"""

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


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    body = case.body
    if not isinstance(body, dict):
        return
    expires = _parse(body.get("expiresAt"))
    if expires is None:
        return
    now = datetime.now(timezone.utc)
    not_before = _parse(body.get("notBefore"))
    floor = max(now, not_before or now) + timedelta(days=1)
    if expires < floor:
        body["expiresAt"] = floor.isoformat().replace("+00:00", "Z")
