//! The tool-gateway HTTP API as a sans-IO exchange (being written).
