-- The inbox table of github.com/redisonce/redisonce/integrations/postgres.
--
-- One row per message id whose effect committed: the row is written by the
-- first statement of the effect's transaction and commits with it, or not at
-- all, so a row means "the effect committed, once".
--
-- Inbox.CreateTable runs this file with the table name of WithInboxTable in
-- place of redisonce_inbox (the index is named after the table). A DBA may run
-- it by hand instead; keep the column names and types.
--
--   id            the message id (text: valid UTF-8, no NUL, at most 1 KiB)
--   fence         the fence of the lease whose transaction committed, a
--                 decimal uint64 (store.Lease.Fence), for audits and for
--                 comparing with fences fn wrote to rows of its own
--   owner         that lease's owner token
--   processed_at  when the effect's transaction wrote the row; Prune deletes
--                 rows older than the retention window, in bounded batches,
--                 through its index
CREATE TABLE IF NOT EXISTS redisonce_inbox (
    id           text           NOT NULL PRIMARY KEY,
    fence        numeric(20, 0) NOT NULL CHECK (fence >= 0),
    owner        text           NOT NULL,
    processed_at timestamptz    NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS redisonce_inbox_processed_at_idx ON redisonce_inbox (processed_at);
