//! Views: compact datatype trees describing noncontiguous accesses (see issue 3).
