//! The formats humans type and read: durations (`500ms`, `3s`, `1h30m`, as in Go, and `1d`),
//! sizes (`4096`, `64KiB`, `1MiB`) and RFC 3339 UTC times (`2026-07-18T12:00:00.25Z`), or a
//! time given as a duration from now (`10m`).

use std::time::Duration;

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// A duration, size or time that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} {input:?}: {reason}")]
pub struct ParseError {
    kind: &'static str,
    input: String,
    reason: &'static str,
}

fn parse_err(kind: &'static str, input: &str, reason: &'static str) -> ParseError {
    ParseError {
        kind,
        input: input.to_owned(),
        reason,
    }
}

/// Parse a Go-style duration: one or more `<number><unit>` pairs, units `ns`, `us`, `µs`,
/// `ms`, `s`, `m`, `h`, and `d` (24 h, which Go lacks); fractions allowed (`1.5h`); a bare `0`
/// is zero. Negative durations are
/// refused: nothing here waits a negative time.
pub fn parse_duration(input: &str) -> Result<Duration, ParseError> {
    const KIND: &str = "duration";
    let s = input.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(parse_err(KIND, input, "empty"));
    }
    if s.starts_with('-') {
        return Err(parse_err(KIND, input, "must not be negative"));
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    let mut total_ns: f64 = 0.0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return Err(parse_err(KIND, input, "expected a number"));
        }
        let number: f64 = rest[..num_len]
            .parse()
            .map_err(|_| parse_err(KIND, input, "bad number"))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit_ns = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "d" => 86_400e9,
            "" => {
                return Err(parse_err(
                    KIND,
                    input,
                    "missing unit (use ms, s, m, h or d)",
                ))
            }
            _ => {
                return Err(parse_err(
                    KIND,
                    input,
                    "unknown unit (use ms, s, m, h or d)",
                ))
            }
        };
        rest = &rest[unit_len..];
        total_ns += number * unit_ns;
    }
    if !total_ns.is_finite() || total_ns > 1e18 {
        return Err(parse_err(KIND, input, "too large"));
    }
    Ok(Duration::from_nanos(total_ns.round() as u64))
}

/// Format a duration the way [`parse_duration`] reads it back (`1h30m`, `500ms`, `0s`).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".to_owned();
    }
    let (h, m, s, rest_ms) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 {
        out.push_str(&format!("{s}s"));
    }
    if rest_ms > 0 {
        out.push_str(&format!("{rest_ms}ms"));
    }
    out
}

/// Parse a size: plain bytes (`4096`) or a number with a unit: `B`, `KB`/`MB`/`GB`/`TB`
/// (powers of 1000) or `KiB`/`MiB`/`GiB`/`TiB` (powers of 1024), case-insensitive.
pub fn parse_size(input: &str) -> Result<u64, ParseError> {
    const KIND: &str = "size";
    let s = input.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    if split == 0 {
        return Err(parse_err(KIND, input, "expected a number"));
    }
    let number: u64 = s[..split]
        .parse()
        .map_err(|_| parse_err(KIND, input, "bad number"))?;
    let factor: u64 = match s[split..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1000,
        "mb" => 1000_u64.pow(2),
        "gb" => 1000_u64.pow(3),
        "tb" => 1000_u64.pow(4),
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => {
            return Err(parse_err(
                KIND,
                input,
                "unknown unit (use B, KiB, MiB, GiB)",
            ))
        }
    };
    number
        .checked_mul(factor)
        .ok_or_else(|| parse_err(KIND, input, "too large"))
}

/// A size in the largest binary unit that divides it exactly (`1MiB`, `1536KiB`, `100B`): what
/// [`parse_size`] reads back to the same number.
pub fn format_size(bytes: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes != 0 && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{bytes}B")
}

/// Milliseconds since the epoch as RFC 3339 UTC, always with three fractional digits, so that
/// times align in tables and sort as strings: `2026-07-18T12:00:00.250Z`. (spoold v0.1.0
/// dropped trailing zeros; RFC 3339 parsers read both.)
pub fn format_time(ms: i64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    let Ok(t) = OffsetDateTime::from_unix_timestamp_nanos(nanos) else {
        return "invalid-time".to_owned();
    };
    let mut out = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    );
    out.push_str(&format!(".{:03}Z", t.millisecond()));
    out
}

/// Parse an RFC 3339 time (any offset) to milliseconds since the epoch.
pub fn parse_time(input: &str) -> Result<i64, ParseError> {
    let t = OffsetDateTime::parse(input.trim(), &Rfc3339).map_err(|_| {
        parse_err(
            "time",
            input,
            "expected RFC 3339, e.g. 2026-07-18T12:00:00Z",
        )
    })?;
    // An offset can carry 9999-12-31T23:59-23:59 into the year 10000 (or 0000-01-01+01:00 into
    // year -1) in UTC, which RFC 3339 cannot write: refuse it here rather than accept a time
    // that `format_time` could not give back.
    let utc_year = t.checked_to_utc().map(|utc| utc.year());
    if !utc_year.is_some_and(|year| (0..=9999).contains(&year)) {
        return Err(parse_err(
            "time",
            input,
            "out of range (years 0000 to 9999 in UTC)",
        ));
    }
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000)
        .map_err(|_| parse_err("time", input, "out of range"))
}

/// A time as people give it on a command line: RFC 3339 (any offset), or a duration from
/// `now_ms` (`10m`, `1d12h`). Milliseconds since the epoch.
pub fn parse_time_or_from_now(input: &str, now_ms: i64) -> Result<i64, ParseError> {
    if let Ok(at) = parse_time(input) {
        return Ok(at);
    }
    let from_now = parse_duration(input).map_err(|_| {
        parse_err(
            "time",
            input,
            "expected RFC 3339 (2026-07-18T12:00:00Z) or a duration from now (10m, 1d)",
        )
    })?;
    i64::try_from(from_now.as_millis())
        .ok()
        .and_then(|ms| now_ms.checked_add(ms))
        .ok_or_else(|| parse_err("time", input, "out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_or_a_duration_from_now() {
        let now = 1_800_000_000_000;
        assert_eq!(parse_time_or_from_now("10m", now), Ok(now + 600_000));
        assert_eq!(parse_time_or_from_now("1d12h", now), Ok(now + 129_600_000));
        assert_eq!(
            parse_time_or_from_now("2026-07-18T12:00:00Z", now),
            parse_time("2026-07-18T12:00:00Z")
        );
        let err = parse_time_or_from_now("tomorrow", now).expect_err("refused");
        assert!(err.to_string().contains("or a duration from now"), "{err}");
    }

    #[test]
    fn times_whose_utc_year_rfc3339_cannot_write_are_refused() {
        for input in [
            "9999-12-31T23:59:59.999999999-23:59",
            "0000-01-01T00:00:00+00:01",
        ] {
            let err = parse_time(input).expect_err("refused");
            assert!(err.to_string().contains("out of range"), "{err}");
        }
        for input in ["9999-12-31T23:59:59.999Z", "0000-01-01T00:00:00Z"] {
            let ms = parse_time(input).expect("in range");
            assert_eq!(parse_time(&format_time(ms)), Ok(ms), "{input}");
        }
    }

    #[test]
    fn sizes_format_to_what_parses_back() {
        for (n, text) in [
            (1 << 20, "1MiB"),
            (1536 << 10, "1536KiB"),
            (100, "100B"),
            (0, "0B"),
        ] {
            assert_eq!(format_size(n), text);
            assert_eq!(parse_size(text).ok(), Some(n));
        }
    }

    #[test]
    fn durations() {
        let ok = [
            ("0", 0),
            ("500ms", 500),
            ("3s", 3000),
            ("5m", 300_000),
            ("1h30m", 5_400_000),
            ("1d", 86_400_000),
            ("1d12h", 129_600_000),
            ("1m30s", 90_000),
            ("1.5h", 5_400_000),
            ("168h", 604_800_000),
            ("2m3s4ms", 123_004),
            ("1500us", 1),
        ];
        for (input, ms) in ok {
            assert_eq!(
                parse_duration(input).map(|d| d.as_millis() as u64),
                Ok(ms),
                "{input}"
            );
        }
        for bad in ["", "5", "abc", "-1s", "1x", "s", "1h30"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_round_trip() {
        for input in ["1h30m", "500ms", "3s", "2m3s4ms"] {
            let d = parse_duration(input).expect("valid");
            assert_eq!(format_duration(d), input);
        }
        assert_eq!(format_duration(Duration::ZERO), "0s");
    }

    #[test]
    fn sizes() {
        let ok = [
            ("4096", 4096),
            ("64KiB", 65_536),
            ("1MiB", 1_048_576),
            ("1GiB", 1_073_741_824),
            ("2mb", 2_000_000),
            ("10 B", 10),
        ];
        for (input, n) in ok {
            assert_eq!(parse_size(input), Ok(n), "{input}");
        }
        for bad in ["", "MiB", "1.5MiB", "12XB", "99999999999TiB"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn times() {
        assert_eq!(format_time(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_time(1_784_376_000_250), "2026-07-18T12:00:00.250Z");
        assert_eq!(parse_time("2026-07-18T12:00:00.25Z"), Ok(1_784_376_000_250));
        assert_eq!(
            parse_time("2026-07-18T14:00:00+02:00"),
            Ok(1_784_376_000_000)
        );
        assert!(parse_time("2026-07-18 12:00").is_err());
        assert!(parse_time("yesterday").is_err());
    }
}
