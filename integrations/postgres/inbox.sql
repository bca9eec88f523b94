-- The inbox table of github.com/redisonce/redisonce/integrations/postgres.
--
-- One row per message id: the fence and owner of the latest lease that
-- reached the database, and processed_at once the message's effect committed.
-- The row is marked processed in the same transaction as the effect, so a
-- processed row means "the effect committed, once".
--
-- Inbox.CreateTable runs this file with the table name of WithInboxTable in
-- place of redisonce_inbox (the index is named after the table). A DBA may run
-- it by hand instead; keep the column names and types.
--
--   id            the message id (text: valid UTF-8, no NUL, at most 1 KiB)
--   fence         the lease's fence, a decimal uint64; a lease whose fence is
--                 lower than the row's is refused
--   owner         the lease's owner token; only the owner named here may mark
--                 the row processed
--   processed_at  when the effect committed; NULL while an owner is at work
--                 (or after one failed or died)
--   updated_at    the last change; Prune deletes rows older than the
--                 retention window in bounded batches, through its index
CREATE TABLE IF NOT EXISTS redisonce_inbox (
    id           text           NOT NULL PRIMARY KEY,
    fence        numeric(20, 0) NOT NULL CHECK (fence >= 0),
    owner        text           NOT NULL,
    processed_at timestamptz,
    updated_at   timestamptz    NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS redisonce_inbox_updated_at_idx ON redisonce_inbox (updated_at);
