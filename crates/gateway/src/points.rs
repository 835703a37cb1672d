//! Point values that change over time, as a building's sensors would:
//! analog values (temperatures) drift slowly, binary values (on/off)
//! toggle. Values are pure functions of time and point id, so the gateway
//! keeps no state per point and any thread can answer.

/// Kind of a point, decided by its id and the building's analog fraction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointKind {
    Analog,
    Binary,
}

pub fn kind(id: u32, analog_percent: u8) -> PointKind {
    if (id % 100) < analog_percent as u32 {
        PointKind::Analog
    } else {
        PointKind::Binary
    }
}

/// The value of point `id` at `t_ns` (seconds since boot drive it).
pub fn value(id: u32, analog_percent: u8, t_ns: u64) -> f64 {
    let t = t_ns as f64 / 1e9;
    match kind(id, analog_percent) {
        PointKind::Analog => {
            // A daily-ish swing compressed to minutes, with a per-point phase
            // and a small fast ripple so consecutive reads differ.
            let phase = id as f64 * 0.37;
            let slow = 3.0 * (t / (300.0 + (id % 60) as f64) * std::f64::consts::TAU + phase).sin();
            let ripple = 0.05 * (t * 1.7 + phase).sin();
            ((21.0 + slow + ripple) * 100.0).round() / 100.0
        }
        PointKind::Binary => {
            let cycle = 30 + (id % 45) as u64;
            let on = ((t as u64 + id as u64) / cycle).is_multiple_of(2);
            if on {
                1.0
            } else {
                0.0
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_plausible_and_change() {
        assert_eq!(kind(5, 70), PointKind::Analog);
        assert_eq!(kind(75, 70), PointKind::Binary);
        let a = value(5, 70, 1_000_000_000);
        let b = value(5, 70, 100_000_000_000);
        assert!((17.0..25.0).contains(&a));
        assert_ne!(a, b);
        let v = value(75, 70, 5_000_000_000);
        assert!(v == 0.0 || v == 1.0);
    }
}
