#pragma once

// The journal's two backends, opened by journal_store::open.

#include "tasksup/journal/journal_store.hpp"

namespace tasksup::journal {

/// The SQLite journal in `opts.dir` (sqlite_store.cpp).
expected<std::unique_ptr<journal_store>>
open_sqlite_store(const store_options& opts);

/// The PostgreSQL journal at `opts.url` (postgres_store.cpp).
expected<std::unique_ptr<journal_store>>
open_postgres_store(const store_options& opts);

} // namespace tasksup::journal
