//! Durations on the command line: `500ms`, `10s`, `2m`, `1h`, `1.5s`; a bare `0` is zero.

use std::time::Duration;

/// Parses a duration; the error says what is wrong.
pub fn parse(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.starts_with('-') {
        return Err(format!(
            "{s:?} is negative; a duration is 0 or more (for --wait: 0 tries once, and leaving --wait out waits \
             forever)"
        ));
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("{s:?} has no unit (use ms, s, m or h, e.g. 500ms or 10s)"))?;
    let (num, unit) = s.split_at(split);
    let value: f64 = num.parse().map_err(|_| format!("{s:?} does not start with a number"))?;
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("{s:?} has an unknown unit {unit:?} (use ms, s, m or h)")),
    };
    let secs = value * scale;
    if !secs.is_finite() || secs > 1e9 {
        return Err(format!("{s:?} is too long"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["", "10", "s", "10x", "-1s", "1e400s", "ten s", "1.2.3s"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
