//! Time as a dependency: everything that reads the current time (store timestamps, `notBefore`,
//! the scheduler, cron) takes a [`Clock`], so tests can drive time by hand.

use std::sync::Mutex;

use chrono::{DateTime, Duration, SecondsFormat, Utc};

pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> DateTime<Utc>;
}

/// The real wall clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that only moves when told to (tests).
pub struct ManualClock(Mutex<DateTime<Utc>>);

impl ManualClock {
    pub fn new(start: DateTime<Utc>) -> Self {
        ManualClock(Mutex::new(start))
    }

    pub fn advance(&self, by: Duration) {
        let mut now = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *now += by;
    }

    pub fn set(&self, to: DateTime<Utc>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The one timestamp format of the project: RFC 3339, UTC, milliseconds, `Z`
/// (`2026-11-29T15:04:05.123Z`). Strings in this format sort in time order.
pub fn iso(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Parse any RFC 3339 timestamp into UTC.
pub fn parse_iso(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text.trim()).ok().map(|t| t.with_timezone(&Utc))
}

/// Serde for a [`DateTime<Utc>`] as [`iso`] text: a typed time reads on the wire (and in the
/// JSON the store keeps) exactly as the strings it replaced. `#[serde(with = "crate::clock::iso_serde")]`;
/// [`iso_serde::option`] for an `Option`.
pub mod iso_serde {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::iso(*t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        let text = String::deserialize(d)?;
        super::parse_iso(&text).ok_or_else(|| D::Error::custom(format!("not an RFC 3339 time: `{text}`")))
    }

    pub mod option {
        use chrono::{DateTime, Utc};
        use serde::{Deserialize, Deserializer, Serializer, de::Error};

        pub fn serialize<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
            match t {
                Some(t) => s.serialize_str(&crate::clock::iso(*t)),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
            match Option::<String>::deserialize(d)? {
                None => Ok(None),
                Some(text) => crate::clock::parse_iso(&text)
                    .map(Some)
                    .ok_or_else(|| D::Error::custom(format!("not an RFC 3339 time: `{text}`"))),
            }
        }
    }
}

/// Milliseconds from one time to a later one (`None` if `to` is earlier).
pub fn millis_from(from: DateTime<Utc>, to: DateTime<Utc>) -> Option<u64> {
    u64::try_from((to - from).num_milliseconds()).ok()
}

/// The first time strictly after `after` at which a cron expression fires, in an IANA time zone.
/// Five fields (`min hour dom mon dow`) get a `0` seconds field in front; six (`sec min hour dom
/// mon dow`) are taken as they are. Local times skipped by a DST jump do not fire that day; a
/// local time that happens twice (DST ends) fires once, at its first occurrence.
pub fn next_cron(expr: &str, timezone: &str, after: DateTime<Utc>) -> Result<Option<DateTime<Utc>>, ClockError> {
    let tz = parse_timezone(timezone)?;
    let schedule = parse_cron(expr)?;
    let local_after = after.with_timezone(&tz);
    let Some(first) = schedule.after(&local_after).next() else { return Ok(None) };
    // The cron crate walks local wall-clock times; when DST ends, the repeated hour maps to
    // two instants. Keep the first: if the previous firing had the same wall-clock time an hour
    // earlier, this one is the repeat, so take the one after it.
    let wall = first.naive_local();
    let earlier = first - Duration::hours(1);
    let is_repeat = earlier.naive_local() == wall && earlier.with_timezone(&Utc) > after && schedule.includes(earlier);
    let chosen = if is_repeat { earlier } else { first };
    Ok(Some(chosen.with_timezone(&Utc)))
}

/// A time zone or cron expression that cannot be used; the message says how to write one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClockError {
    #[error("Unknown time zone: {0} (use an IANA name such as Europe/Berlin or UTC)")]
    UnknownTimeZone(String),
    #[error("{0}")]
    InvalidCron(String),
}

pub fn parse_timezone(name: &str) -> Result<chrono_tz::Tz, ClockError> {
    name.parse::<chrono_tz::Tz>().map_err(|_| ClockError::UnknownTimeZone(name.to_string()))
}

pub fn parse_cron(expr: &str) -> Result<cron::Schedule, ClockError> {
    let fields = expr.split_whitespace().count();
    let full = match fields {
        5 => format!("0 {}", expr.trim()),
        6 => expr.trim().to_string(),
        n => {
            return Err(ClockError::InvalidCron(format!(
                "Invalid cron expression `{expr}`: expected 5 fields (min hour day month weekday) or 6 (with seconds first), got {n}"
            )));
        }
    };
    // The cron crate numbers weekdays 1-7 from Sunday, Unix cron 0-6: a number is ambiguous, so
    // only names are accepted (`mon-fri`), which read the same everywhere.
    let weekday_field = full.split_whitespace().nth(5).unwrap_or("*");
    if weekday_field.chars().any(|c| c.is_ascii_digit()) && !weekday_field.starts_with("*/") {
        return Err(ClockError::InvalidCron(format!(
            "Invalid cron expression `{expr}`: write weekdays as names (sun, mon, tue, wed, thu, fri, sat), e.g. `0 9 * * mon-fri`"
        )));
    }
    full.parse::<cron::Schedule>()
        .map_err(|e| ClockError::InvalidCron(format!("Invalid cron expression `{expr}`: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        parse_iso(s).expect("timestamp")
    }

    fn next(expr: &str, tz: &str, after: &str) -> String {
        iso(next_cron(expr, tz, at(after)).expect("valid").expect("fires"))
    }

    #[test]
    fn five_and_six_fields() {
        assert_eq!(next("*/15 * * * *", "UTC", "2026-01-01T10:07:00Z"), "2026-01-01T10:15:00.000Z");
        assert_eq!(next("30 0 9 * * Mon", "UTC", "2026-01-01T00:00:00Z"), "2026-01-05T09:00:30.000Z");
        assert!(
            next_cron("* * *", "UTC", at("2026-01-01T00:00:00Z"))
                .unwrap_err()
                .to_string()
                .contains("expected 5 fields")
        );
        assert!(next_cron("61 * * * *", "UTC", at("2026-01-01T00:00:00Z")).is_err());
        assert!(
            next_cron("0 9 * * 1-5", "UTC", at("2026-01-01T00:00:00Z"))
                .unwrap_err()
                .to_string()
                .contains("weekdays as names")
        );
        assert_eq!(next("0 9 * * mon-fri", "UTC", "2026-01-03T00:00:00Z"), "2026-01-05T09:00:00.000Z");
        assert!(
            next_cron("* * * * *", "Mars/Base", at("2026-01-01T00:00:00Z"))
                .unwrap_err()
                .to_string()
                .starts_with("Unknown time zone")
        );
    }

    /// Europe/Berlin springs forward on 2026-03-29 (02:00 → 03:00) and falls back on 2026-10-25
    /// (03:00 → 02:00).
    #[test]
    fn daily_cron_across_berlin_dst_changes() {
        // 09:00 local stays 09:00 local: 08:00Z in winter, 07:00Z in summer.
        assert_eq!(next("0 9 * * *", "Europe/Berlin", "2026-03-28T09:00:00Z"), "2026-03-29T07:00:00.000Z");
        assert_eq!(next("0 9 * * *", "Europe/Berlin", "2026-10-24T08:00:00Z"), "2026-10-25T08:00:00.000Z");
        // 02:30 does not exist on 2026-03-29: the next firing is the day after.
        assert_eq!(next("30 2 * * *", "Europe/Berlin", "2026-03-28T02:00:00Z"), "2026-03-30T00:30:00.000Z");
        // 02:30 happens twice on 2026-10-25: it fires once, at the first (summer time) one.
        assert_eq!(next("30 2 * * *", "Europe/Berlin", "2026-10-24T02:00:00Z"), "2026-10-25T00:30:00.000Z");
        assert_eq!(next("30 2 * * *", "Europe/Berlin", "2026-10-25T00:30:00Z"), "2026-10-26T01:30:00.000Z");
    }
}
