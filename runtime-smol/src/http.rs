//! The async HTTP client of the tool gateway (being written).
