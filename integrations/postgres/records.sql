-- The table of Records (package postgres): one row per idempotency key whose
-- outcome Records.Do committed in the same transaction as fn's writes.
--
-- Records.CreateTable runs this file, its comments dropped, with the table
-- name of WithRecordsTable in place of redisonce_records (the index is named
-- after the table). A DBA may run it by hand instead; every statement is
-- idempotent.
--
-- Columns:
--   key          the record key, as bytes (a key may hold any byte).
--   fence        the fence of the Redis lease that last claimed the row, a
--                decimal uint64. A claim with a lower fence is refused, and
--                so is the final write of an owner whose claim was replaced.
--   token        the owner token of that lease.
--   status       'pending' while an owner runs fn; 'completed' or 'failed'
--                (or a status Records.Update wrote) once the outcome committed.
--   fingerprint  the request fingerprint ('' = none), checked like Redis's.
--   result       the stored result: fn's result, or a failed run's error text.
--   created_at   when the row was first claimed.
--   updated_at   when the row was last written.
--   expires_at   when the row's retention ends (NULL = never); rows past it
--                are ignored and Records.Prune deletes them in bounded batches.
CREATE TABLE IF NOT EXISTS redisonce_records (
    key         bytea         PRIMARY KEY,
    fence       numeric(20,0) NOT NULL CHECK (fence >= 0),
    token       text          NOT NULL,
    status      text          NOT NULL,
    fingerprint bytea         NOT NULL DEFAULT '',
    result      bytea,
    created_at  timestamptz   NOT NULL,
    updated_at  timestamptz   NOT NULL,
    expires_at  timestamptz
);

-- Prune walks this index, a bounded batch at a time.
CREATE INDEX IF NOT EXISTS redisonce_records_expires_at
    ON redisonce_records (expires_at) WHERE expires_at IS NOT NULL;
