//! Reading a running agent's /metrics the way Prometheus does: tests wait on its counters and
//! gauges, never on the clock.

use std::io::{Read, Write};
use std::net::TcpStream;

/// The /metrics text served on `127.0.0.1:port` (empty while nothing listens).
pub fn scrape(port: u16) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    if s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return String::new();
    }
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body
}

/// One series' value (`name{labels}` as exposed), -1 when absent.
pub fn value_in(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(series))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_is_found_by_its_whole_name() {
        let text = "# HELP x\ncapstan_a_total{r=\"x\"} 3\ncapstan_a_total{r=\"xy\"} 4\n";
        assert_eq!(value_in(text, "capstan_a_total{r=\"xy\"}"), 4.0);
        assert_eq!(value_in(text, "capstan_a_total{r=\"x\"}"), 3.0);
        assert_eq!(value_in(text, "capstan_a_total"), -1.0);
    }
}
