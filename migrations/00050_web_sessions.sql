-- +goose Up
-- Console sign-in: a bcrypt password per user (optional: API-key-only users have none) and the
-- browser sessions made by signing in. A session is stored as the SHA-256 of its cookie value
-- (random, 256 bits) with the CSRF token that unsafe requests must echo in a header.

CREATE TABLE user_passwords (
    user_id    uuid PRIMARY KEY REFERENCES users (id),
    hash       bytea NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE web_sessions (
    hash       bytea PRIMARY KEY,
    user_id    uuid NOT NULL REFERENCES users (id),
    csrf_token text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX web_sessions_user ON web_sessions (user_id);
CREATE INDEX web_sessions_expiry ON web_sessions (expires_at);

-- +goose Down
DROP TABLE web_sessions;
DROP TABLE user_passwords;
