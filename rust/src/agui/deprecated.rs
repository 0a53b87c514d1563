//! Deprecated forms the AG-UI protocol still tolerates for a while, each with its expiry.
//!
//! Pure: the store never reads a clock. Whoever builds the store says what day it is
//! (`StoreOptions::today`); without a date every deprecation window counts as closed, so the
//! strict reading applies.
//!
//! The one whole-field `null` on the protocol's deprecation list is `rawEvent: null`: until
//! `RAW_EVENT_NULL_EXPIRES` it is converted to absent with a warning per occurrence; on and
//! after that date it is a malformed known value (`null_value`) like any other `null`.

use std::fmt;

use serde_json::{Map, Value};

use super::error::{AguiError, Warning, NULL_VALUE, RAW_EVENT_NULL};

/// A calendar date (proleptic Gregorian). Orders chronologically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Date {
    year: i32,
    month: u8,
    day: u8,
}

impl Date {
    /// The date, or `None` when the month or day does not exist.
    pub fn new(year: i32, month: u32, day: u32) -> Option<Date> {
        let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
        let days = match month {
            1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
            4 | 6 | 9 | 11 => 30,
            2 if leap => 29,
            2 => 28,
            _ => return None,
        };
        if day == 0 || day > days {
            return None;
        }
        Some(Date {
            year,
            month: month as u8,
            day: day as u8,
        })
    }

    /// `(year, month, day)`.
    pub fn parts(&self) -> (i32, u8, u8) {
        (self.year, self.month, self.day)
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }
}

/// The first day on which `rawEvent: null` is fatal.
pub const RAW_EVENT_NULL_EXPIRES: Date = Date {
    year: 2027,
    month: 9,
    day: 8,
};

/// True while `rawEvent: null` is still tolerated on `today` (never without a date).
pub fn raw_event_null_tolerated(today: Option<Date>) -> bool {
    today.is_some_and(|d| d < RAW_EVENT_NULL_EXPIRES)
}

/// Applies the `rawEvent: null` rule to one event: removes the member with a warning while
/// tolerated, or refuses the event. Any other `rawEvent` value is left for the schema check.
pub fn raw_event_null(
    ev: &mut Map<String, Value>,
    event_type: &str,
    message_id: Option<&str>,
    today: Option<Date>,
    warnings: &mut Vec<Warning>,
) -> Result<(), AguiError> {
    if !matches!(ev.get("rawEvent"), Some(Value::Null)) {
        return Ok(());
    }
    if !raw_event_null_tolerated(today) {
        let when = today.map_or_else(
            || "no date was given, so the deprecation window counts as closed".to_owned(),
            |d| format!("the deprecation expired on {RAW_EVENT_NULL_EXPIRES} (today is {d})"),
        );
        return Err(AguiError::malformed(
            NULL_VALUE,
            format!("`rawEvent` is null; an absent value is left out, never null ({when})"),
        ));
    }
    ev.shift_remove("rawEvent");
    warnings.push(Warning::new(
        RAW_EVENT_NULL,
        event_type,
        message_id,
        format!(
            "`rawEvent: null` taken as absent; this deprecated form is fatal from \
             {RAW_EVENT_NULL_EXPIRES}"
        ),
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_validate_and_order() {
        assert!(Date::new(2027, 2, 29).is_none());
        assert!(Date::new(2028, 2, 29).is_some());
        assert!(Date::new(1900, 2, 29).is_none());
        assert!(Date::new(2000, 2, 29).is_some());
        assert!(Date::new(2027, 13, 1).is_none());
        assert!(Date::new(2027, 4, 31).is_none());
        assert!(Date::new(2027, 1, 0).is_none());
        let d = |y, m, day| Date::new(y, m, day).unwrap();
        assert!(d(2027, 9, 7) < d(2027, 9, 8) && d(2027, 9, 8) < d(2027, 10, 1));
        assert!(d(2026, 12, 31) < d(2027, 1, 1));
        assert_eq!(RAW_EVENT_NULL_EXPIRES, d(2027, 9, 8));
        assert_eq!(RAW_EVENT_NULL_EXPIRES.to_string(), "2027-09-08");
    }

    #[test]
    fn the_window_closes_on_the_expiry_date() {
        let d = |y, m, day| Date::new(y, m, day);
        assert!(raw_event_null_tolerated(d(2027, 9, 7)));
        assert!(!raw_event_null_tolerated(d(2027, 9, 8)));
        assert!(!raw_event_null_tolerated(d(2030, 1, 1)));
        assert!(!raw_event_null_tolerated(None));
    }
}
