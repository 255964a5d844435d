/// One versioned schema change: a list of SQL statements applied in one transaction.
public struct Migration: Sendable {
    public var version: Int
    public var name: String
    public var statements: [String]
}

/// The schema, in order. Never edit an applied migration: add a new one. The migrator
/// records a checksum of each one and refuses to run against a database whose history
/// differs from this list.
public enum Migrations {
    public static let all: [Migration] = [
        Migration(version: 1, name: "core_schema", statements: [
            """
            CREATE TABLE users (
                whisper_id      text PRIMARY KEY CHECK (whisper_id ~ '^WSP-[A-Z2-7]{4}-[A-Z2-7]{4}-[A-Z2-7]{4}$'),
                enc_public_key  bytea NOT NULL CHECK (octet_length(enc_public_key) = 32),
                sign_public_key bytea NOT NULL CHECK (octet_length(sign_public_key) = 32),
                status          text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'banned')),
                created_at      timestamptz NOT NULL DEFAULT now(),
                updated_at      timestamptz NOT NULL DEFAULT now()
            )
            """,
            // Recovery looks an identity up by its signing key; one key, one identity.
            "CREATE UNIQUE INDEX users_sign_public_key_key ON users (sign_public_key)",
            """
            CREATE TABLE devices (
                device_id    uuid PRIMARY KEY,
                whisper_id   text NOT NULL REFERENCES users (whisper_id) ON DELETE CASCADE,
                platform     text NOT NULL CHECK (platform IN ('ios', 'android')),
                push_token   text,
                voip_token   text,
                active       boolean NOT NULL DEFAULT true,
                created_at   timestamptz NOT NULL DEFAULT now(),
                updated_at   timestamptz NOT NULL DEFAULT now(),
                last_seen_at timestamptz NOT NULL DEFAULT now()
            )
            """,
            "CREATE INDEX devices_whisper_id_idx ON devices (whisper_id)",
            // Single active device: at most one active row per identity.
            "CREATE UNIQUE INDEX devices_one_active_per_user ON devices (whisper_id) WHERE active",
            """
            CREATE TABLE groups (
                group_id   text PRIMARY KEY CHECK (group_id ~ '^grp-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'),
                title      text NOT NULL CHECK (char_length(title) BETWEEN 1 AND 128),
                created_by text NOT NULL REFERENCES users (whisper_id),
                created_at timestamptz NOT NULL DEFAULT now(),
                updated_at timestamptz NOT NULL DEFAULT now()
            )
            """,
            """
            CREATE TABLE group_members (
                group_id   text NOT NULL REFERENCES groups (group_id) ON DELETE CASCADE,
                whisper_id text NOT NULL REFERENCES users (whisper_id) ON DELETE CASCADE,
                role       text NOT NULL DEFAULT 'member' CHECK (role IN ('owner', 'admin', 'member')),
                added_by   text REFERENCES users (whisper_id) ON DELETE SET NULL,
                added_at   timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (group_id, whisper_id)
            )
            """,
            "CREATE INDEX group_members_whisper_id_idx ON group_members (whisper_id)",
            """
            CREATE TABLE bans (
                id         bigserial PRIMARY KEY,
                whisper_id text NOT NULL REFERENCES users (whisper_id) ON DELETE CASCADE,
                reason     text NOT NULL,
                banned_by  text NOT NULL,
                created_at timestamptz NOT NULL DEFAULT now(),
                expires_at timestamptz,
                lifted_at  timestamptz,
                lifted_by  text
            )
            """,
            // One ban in force per identity; lifted bans stay as history.
            "CREATE UNIQUE INDEX bans_one_active_per_user ON bans (whisper_id) WHERE lifted_at IS NULL",
            "CREATE INDEX bans_created_at_idx ON bans (created_at)",
            """
            CREATE TABLE reports (
                id          uuid PRIMARY KEY,
                reporter_id text NOT NULL REFERENCES users (whisper_id) ON DELETE CASCADE,
                reported_id text NOT NULL REFERENCES users (whisper_id) ON DELETE CASCADE,
                reason      text NOT NULL CHECK (reason IN ('spam', 'abuse', 'impersonation', 'illegal', 'other')),
                details     text CHECK (char_length(details) <= 2000),
                message_id  uuid,
                status      text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'dismissed', 'actioned')),
                created_at  timestamptz NOT NULL DEFAULT now(),
                reviewed_at timestamptz,
                reviewed_by text,
                review_note text
            )
            """,
            "CREATE INDEX reports_status_created_at_idx ON reports (status, created_at)",
            "CREATE INDEX reports_reported_id_idx ON reports (reported_id)",
            """
            CREATE TABLE audit_events (
                id          bigserial PRIMARY KEY,
                occurred_at timestamptz NOT NULL DEFAULT now(),
                actor       text NOT NULL,
                action      text NOT NULL,
                target      text,
                details     jsonb NOT NULL DEFAULT '{}'::jsonb,
                remote_addr text
            )
            """,
            "CREATE INDEX audit_events_occurred_at_idx ON audit_events (occurred_at)",
            "CREATE INDEX audit_events_target_idx ON audit_events (target, occurred_at)",
            """
            CREATE TABLE attachments (
                object_key   text PRIMARY KEY,
                uploader_id  text NOT NULL REFERENCES users (whisper_id) ON DELETE CASCADE,
                content_type text NOT NULL,
                size_bytes   bigint NOT NULL CHECK (size_bytes > 0),
                purpose      text NOT NULL,
                created_at   timestamptz NOT NULL DEFAULT now(),
                expires_at   timestamptz NOT NULL,
                deleted_at   timestamptz
            )
            """,
            "CREATE INDEX attachments_expires_at_idx ON attachments (expires_at) WHERE deleted_at IS NULL",
            "CREATE INDEX attachments_uploader_id_idx ON attachments (uploader_id)",
            // Who an attachment was sent to: GC deletes the blob once every one has acknowledged.
            """
            CREATE TABLE attachment_recipients (
                object_key   text NOT NULL REFERENCES attachments (object_key) ON DELETE CASCADE,
                recipient_id text NOT NULL,
                message_id   uuid NOT NULL,
                acked_at     timestamptz,
                PRIMARY KEY (object_key, recipient_id, message_id)
            )
            """,
            "CREATE INDEX attachment_recipients_unacked_idx ON attachment_recipients (object_key) WHERE acked_at IS NULL",
            "CREATE INDEX attachment_recipients_message_idx ON attachment_recipients (recipient_id, message_id)",
            """
            CREATE TABLE contact_backups (
                whisper_id     text PRIMARY KEY REFERENCES users (whisper_id) ON DELETE CASCADE,
                nonce_b64      text NOT NULL,
                ciphertext_b64 text NOT NULL,
                updated_at     timestamptz NOT NULL DEFAULT now(),
                size_bytes     integer NOT NULL CHECK (size_bytes >= 0)
            )
            """,
        ]),
        // Groups get a membership version: every change of members bumps it, and the
        // per-member records in Redis (`RedisKeys.groups`) carry it, so that a router
        // can tell whether the membership it cached is still the current one.
        Migration(version: 2, name: "group_epoch", statements: [
            "ALTER TABLE groups ADD COLUMN epoch bigint NOT NULL DEFAULT 1 CHECK (epoch > 0)",
        ]),
        // An uploaded object is checked against its declaration (size, type) before it is
        // first handed out: `verified_at` once it matched, `rejected_at` when it did not
        // (never served; gc-worker deletes it).
        Migration(version: 3, name: "attachment_checks", statements: [
            "ALTER TABLE attachments ADD COLUMN verified_at timestamptz",
            "ALTER TABLE attachments ADD COLUMN rejected_at timestamptz",
            // When the router recorded a recipient: gc-worker settles only rows older than
            // a grace period, so a message being stored is never taken for one delivered.
            "ALTER TABLE attachment_recipients ADD COLUMN recorded_at timestamptz NOT NULL DEFAULT now()",
        ]),
        // A report names up to `Limits.MAX_REPORT_MESSAGE_IDS` messages (`messageIds`);
        // the single `message_id` of before is carried over. One open report per
        // reporter and reported identity: a repeated report adds to it instead. (No
        // release before this one served `report_user`, so no pair has two open reports.)
        Migration(version: 4, name: "report_messages", statements: [
            "ALTER TABLE reports ADD COLUMN message_ids uuid[] NOT NULL DEFAULT '{}'",
            "UPDATE reports SET message_ids = ARRAY[message_id] WHERE message_id IS NOT NULL",
            "ALTER TABLE reports DROP COLUMN message_id",
            "ALTER TABLE reports ADD CONSTRAINT reports_message_ids_bound CHECK (cardinality(message_ids) <= 20)",
            "CREATE UNIQUE INDEX reports_one_open_per_pair ON reports (reporter_id, reported_id) WHERE status = 'open'",
        ]),
        // Someone who is not a direct peer of the group's owner is invited, not added: a
        // member only once they accept (docs/protocol.md section 6). Bounded per invitee
        // by the router; gone with the group.
        Migration(version: 5, name: "group_invitations", statements: [
            """
            CREATE TABLE group_invitations (
                group_id   text NOT NULL REFERENCES groups (group_id) ON DELETE CASCADE,
                whisper_id text NOT NULL REFERENCES users (whisper_id) ON DELETE CASCADE,
                invited_by text NOT NULL,
                invited_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (group_id, whisper_id)
            )
            """,
            "CREATE INDEX group_invitations_invitee_idx ON group_invitations (whisper_id, invited_at)",
        ]),
        // Live text: a Whisperer's long-lived conversations (docs/protocol.md section 13),
        // at most MAX_LIVE_CONVERSATIONS per owner (the gateway checks it under the
        // owner's row lock); gone with the owner.
        Migration(version: 6, name: "live_conversations", statements: [
            """
            CREATE TABLE live_conversations (
                conversation_id text PRIMARY KEY,
                owner_id        text NOT NULL REFERENCES users (whisper_id) ON DELETE CASCADE,
                name            text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 128),
                created_at      timestamptz NOT NULL DEFAULT now(),
                updated_at      timestamptz NOT NULL DEFAULT now()
            )
            """,
            "CREATE INDEX live_conversations_owner_idx ON live_conversations (owner_id, created_at)",
        ]),
        // The listeners each Whisperer let in to a conversation, so a returning one is
        // recognised (its listener ID is its device's); at most the gateway's
        // GATEWAY_LIVE_MAX_LISTENERS per conversation; gone with the conversation.
        Migration(version: 7, name: "live_listeners", statements: [
            """
            CREATE TABLE live_listeners (
                conversation_id text NOT NULL REFERENCES live_conversations (conversation_id) ON DELETE CASCADE,
                listener_id     text NOT NULL,
                name            text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 64),
                authorized_at   timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (conversation_id, listener_id)
            )
            """,
        ]),
        // Push-to-talk channels (docs/protocol.md section 14) and their members: at most
        // GATEWAY_PTT_MAX_MEMBERS each (checked under the channel's row lock); a channel
        // whose members have all been away for GATEWAY_PTT_IDLE_DAYS lapses (gc-worker).
        Migration(version: 8, name: "ptt_channels", statements: [
            """
            CREATE TABLE ptt_channels (
                channel_id     text PRIMARY KEY,
                owner_id       text NOT NULL REFERENCES users (whisper_id) ON DELETE CASCADE,
                name           text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 64),
                join_code      text NOT NULL UNIQUE,
                is_public      boolean NOT NULL DEFAULT false,
                created_at     timestamptz NOT NULL DEFAULT now(),
                last_active_at timestamptz NOT NULL DEFAULT now()
            )
            """,
            "CREATE INDEX ptt_channels_active_idx ON ptt_channels (last_active_at)",
            """
            CREATE TABLE ptt_members (
                channel_id text NOT NULL REFERENCES ptt_channels (channel_id) ON DELETE CASCADE,
                whisper_id text NOT NULL REFERENCES users (whisper_id) ON DELETE CASCADE,
                joined_at  timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (channel_id, whisper_id)
            )
            """,
            "CREATE INDEX ptt_members_member_idx ON ptt_members (whisper_id)",
        ]),
        // Members an owner removed from a push-to-talk channel: they join it no more, by
        // its ID (a public channel's) or by any code, while the channel lasts.
        Migration(version: 9, name: "ptt_removed", statements: [
            """
            CREATE TABLE ptt_removed (
                channel_id text NOT NULL REFERENCES ptt_channels (channel_id) ON DELETE CASCADE,
                whisper_id text NOT NULL REFERENCES users (whisper_id) ON DELETE CASCADE,
                removed_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (channel_id, whisper_id)
            )
            """,
        ]),
        // The key directory (docs/key-transparency.md). `users.kt_epoch` is the epoch that
        // last published the identity's entry: NULL while it waits for the next one.
        Migration(version: 10, name: "key_directory", statements: [
            "ALTER TABLE users ADD COLUMN kt_epoch bigint",
            "CREATE INDEX users_kt_waiting ON users (created_at) WHERE kt_epoch IS NULL",
            // One row per identity ever published: its label, the label's VRF proof, and the
            // opening of its current commitment. Kept when the identity is deleted (its
            // entry then says so).
            """
            CREATE TABLE kt_leaves (
                whisper_id text PRIMARY KEY,
                label      bytea NOT NULL UNIQUE CHECK (octet_length(label) = 32),
                vrf_proof  bytea NOT NULL CHECK (octet_length(vrf_proof) = 80),
                opening    bytea NOT NULL CHECK (octet_length(opening) = 32),
                epoch      bigint NOT NULL
            )
            """,
            // The newest epoch's prefix tree, one row per node by position; a leaf's row
            // carries its label and value.
            """
            CREATE TABLE kt_nodes (
                position   bytea PRIMARY KEY,
                hash       bytea NOT NULL CHECK (octet_length(hash) = 32),
                leaf_label bytea CHECK (octet_length(leaf_label) = 32),
                leaf_value bytea CHECK (octet_length(leaf_value) = 32)
            )
            """,
            // The log of epochs: the root of every perfect subtree, as it completes.
            """
            CREATE TABLE kt_log (
                level smallint NOT NULL,
                index bigint NOT NULL,
                hash  bytea NOT NULL CHECK (octet_length(hash) = 32),
                PRIMARY KEY (level, index)
            )
            """,
            // Every epoch's signed head, the depth of its tree, and its update proof.
            """
            CREATE TABLE kt_epochs (
                epoch        bigint PRIMARY KEY CHECK (epoch > 0),
                log_root     bytea NOT NULL,
                prefix_root  bytea NOT NULL,
                published_at bigint NOT NULL,
                key_id       text NOT NULL,
                signature    bytea NOT NULL,
                depth        smallint NOT NULL,
                changes      integer NOT NULL,
                update_proof bytea NOT NULL
            )
            """,
            // The directory's public keys as its signer last started with them.
            """
            CREATE TABLE kt_keys (
                purpose    text NOT NULL CHECK (purpose IN ('vrf', 'signing')),
                position   smallint NOT NULL,
                key_id     text NOT NULL,
                public_key bytea NOT NULL CHECK (octet_length(public_key) = 32),
                PRIMARY KEY (purpose, position)
            )
            """,
        ]),
        // Account deletion (docs/security.md, "Deleting an account"): the identity's row goes,
        // and with it (cascades) its devices, bans, reports, backup, live conversations and
        // push-to-talk channels; its Whisper ID stays here for good, so that it is never
        // given out again and the key directory publishes the deletion (`kt_epoch` NULL
        // until an epoch has). What others keep that named it loses the name: the groups it
        // created, the attachments it uploaded (expired for gc-worker first).
        Migration(version: 11, name: "account_deletion", statements: [
            """
            CREATE TABLE deleted_identities (
                whisper_id text PRIMARY KEY CHECK (whisper_id ~ '^WSP-[A-Z2-7]{4}-[A-Z2-7]{4}-[A-Z2-7]{4}$'),
                deleted_at timestamptz NOT NULL DEFAULT now(),
                kt_epoch   bigint
            )
            """,
            "CREATE INDEX deleted_identities_kt_waiting ON deleted_identities (deleted_at) WHERE kt_epoch IS NULL",
            "ALTER TABLE groups ALTER COLUMN created_by DROP NOT NULL",
            "ALTER TABLE groups DROP CONSTRAINT groups_created_by_fkey",
            "ALTER TABLE groups ADD CONSTRAINT groups_created_by_fkey FOREIGN KEY (created_by) REFERENCES users (whisper_id) ON DELETE SET NULL",
            "ALTER TABLE attachments ALTER COLUMN uploader_id DROP NOT NULL",
            "ALTER TABLE attachments DROP CONSTRAINT attachments_uploader_id_fkey",
            "ALTER TABLE attachments ADD CONSTRAINT attachments_uploader_id_fkey FOREIGN KEY (uploader_id) REFERENCES users (whisper_id) ON DELETE SET NULL",
        ]),
        // The deletion journal (docs/operations.md, "Deletions and restores"): each deletion
        // keeps the owner's signed request, and gc-worker copies it to the object store
        // (`journaled_at` NULL until it has), so that a restore from a dump taken before
        // it can apply it again.
        Migration(version: 12, name: "deletion_journal", statements: [
            "ALTER TABLE deleted_identities ADD COLUMN request_timestamp bigint",
            "ALTER TABLE deleted_identities ADD COLUMN request_signature text",
            "ALTER TABLE deleted_identities ADD COLUMN journaled_at timestamptz",
            "CREATE INDEX deleted_identities_unjournaled ON deleted_identities (deleted_at) WHERE journaled_at IS NULL",
        ]),
        // The key directory's key statements (docs/key-transparency.md, "Rotation"): which
        // signing key endorsed which, and which retired when, kept for good so that a
        // client that held any key of the directory can follow every rotation since.
        Migration(version: 13, name: "key_statements", statements: [
            """
            CREATE TABLE kt_key_statements (
                kind       text NOT NULL CHECK (kind IN ('endorse', 'retire')),
                public_key bytea NOT NULL CHECK (octet_length(public_key) = 32),
                signer_id  text NOT NULL,
                at         bigint NOT NULL,
                signature  bytea NOT NULL CHECK (octet_length(signature) = 64),
                PRIMARY KEY (kind, public_key, signer_id)
            )
            """,
        ]),
        // The deletion journal's objects are named by a keyed hash of the ID, not the ID
        // (`DeletionJournal`): the name each deletion's object has, so that a walk of the
        // journal tells the deletions the database holds without opening their objects.
        Migration(version: 14, name: "deletion_journal_names", statements: [
            "ALTER TABLE deleted_identities ADD COLUMN journal_name text",
            "CREATE INDEX deleted_identities_journal_name ON deleted_identities (journal_name)",
        ]),
        // Third-party auditors' newest signatures (docs/key-transparency.md, "Third-party
        // auditing"): one row per auditor key, replaced by a signature of a later epoch.
        Migration(version: 15, name: "kt_audits", statements: [
            """
            CREATE TABLE kt_audits (
                auditor_key_id text PRIMARY KEY,
                epoch          bigint NOT NULL,
                signed_at      bigint NOT NULL,
                signature      bytea NOT NULL CHECK (octet_length(signature) = 64)
            )
            """,
        ]),
        // The console's list of identities (`UserSearch` in admin): newest first, and by
        // the start of an ID whatever the database's collation.
        Migration(version: 16, name: "console_user_search", statements: [
            "CREATE INDEX users_created_at ON users (created_at DESC, whisper_id DESC)",
            "CREATE INDEX users_whisper_id_pattern ON users (whisper_id text_pattern_ops)",
        ]),
        // Listener profiles (docs/protocol.md section 13): a device with no row here is
        // alone in the profile whose ID is its device ID (`live_profile_of`).
        // `live_listeners.listener_id` is a profile ID. Codes are kept as SHA-256
        // digests, each used once.
        Migration(version: 17, name: "live_profiles", statements: [
            """
            CREATE TABLE live_profiles (
                profile_id text PRIMARY KEY,
                name       text CHECK (char_length(name) BETWEEN 1 AND 64),
                created_at timestamptz NOT NULL DEFAULT now(),
                updated_at timestamptz NOT NULL DEFAULT now()
            )
            """,
            """
            CREATE TABLE live_profile_devices (
                device_id  text PRIMARY KEY,
                profile_id text NOT NULL REFERENCES live_profiles (profile_id) ON DELETE CASCADE,
                joined_at  timestamptz NOT NULL DEFAULT now()
            )
            """,
            "CREATE INDEX live_profile_devices_profile ON live_profile_devices (profile_id)",
            """
            CREATE TABLE live_profile_codes (
                code_digest bytea PRIMARY KEY,
                profile_id  text NOT NULL REFERENCES live_profiles (profile_id) ON DELETE CASCADE,
                expires_at  timestamptz NOT NULL
            )
            """,
            "CREATE INDEX live_profile_codes_profile ON live_profile_codes (profile_id)",
            "CREATE INDEX live_listeners_listener ON live_listeners (listener_id, authorized_at DESC)",
            // The name the Whisperer last whispered under, for its listeners' lists.
            "ALTER TABLE live_conversations ADD COLUMN whisperer_name text",
            // The one statement of which profile a device is in.
            """
            CREATE FUNCTION live_profile_of(device text) RETURNS text LANGUAGE sql STABLE AS
            $$ SELECT COALESCE((SELECT profile_id FROM live_profile_devices WHERE device_id = device), device) $$
            """,
        ]),
    ]

    /// The version a service needs before it reports ready.
    public static var latestVersion: Int { all.last?.version ?? 0 }
}
