//! The blocking HTTP client of the tool gateway (being written).
