//! Property tests of the gateway's request parser: any bytes give a request
//! or a reason, never a panic; every request the crawler builds parses back.

use ontime_gateway::wire::{parse_request, request_body, MAX_POINTS_PER_REQUEST};
use proptest::prelude::*;

proptest! {
    #[test]
    fn any_bytes_give_a_request_or_a_reason(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_request(&body);
    }

    #[test]
    fn json_shaped_noise_never_panics(s in r#"\{"points":\[[0-9,\- ]{0,40}\]?[,}"a:]{0,5}"#) {
        let _ = parse_request(s.as_bytes());
    }

    #[test]
    fn the_crawlers_requests_parse_back(points in proptest::collection::vec(any::<u32>(), 1..=MAX_POINTS_PER_REQUEST)) {
        let r = parse_request(request_body(&points).as_bytes()).unwrap();
        prop_assert_eq!(r.points, points);
    }
}
