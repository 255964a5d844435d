/// The limits of docs/protocol.md section 3, by their protocol names, plus the bounds this project adds
/// where the spec is silent (each documented in docs/protocol.md).
public enum Limits {
    public static let MAX_WS_FRAME_BYTES = 512_000
    public static let MAX_TEXT_BYTES = 8_000
    public static let MAX_IMAGE_BYTES = 15_000_000
    public static let MAX_VOICE_BYTES = 25_000_000
    public static let MAX_FILE_BYTES = 50_000_000
    public static let PENDING_TTL_HOURS = 72
    public static let FETCH_PENDING_LIMIT_DEFAULT = 50
    public static let SESSION_TTL_DAYS = 7
    public static let CHALLENGE_TTL_SECONDS = 60
    public static let TIMESTAMP_SKEW_MS = 600_000

    /// The largest page `fetch_pending` returns, whatever `limit` asks for.
    public static let FETCH_PENDING_LIMIT_MAX = 200
    /// Members of one group, the creator included.
    public static let MAX_GROUP_MEMBERS = 256
    public static let MAX_GROUP_TITLE_CHARS = 128
    /// A live-text conversation's name, in Unicode scalars.
    public static let MAX_LIVE_CONVERSATION_NAME_CHARS = 128
    /// Live-text conversations one identity may keep.
    public static let MAX_LIVE_CONVERSATIONS = 100
    /// A listener's or Whisperer's name as the other side sees it, in Unicode scalars.
    public static let MAX_LIVE_PERSON_NAME_CHARS = 64
    /// A listener's P-256 public key, uncompressed (0x04, x, y).
    public static let LIVE_PUBLIC_KEY_BYTES = 65
    /// A conversation key sealed to a listener: ephemeral public key (65), nonce (12),
    /// the 32-byte key encrypted (32) and its tag (16).
    public static let LIVE_SEALED_KEY_BYTES = 125
    /// A sealed live packet, decoded: nonce (12) and tag (16) at least, this at most.
    public static let LIVE_PACKET_OVERHEAD_BYTES = 28
    public static let MAX_LIVE_PACKET_BYTES = 4_096
    /// Conversation keys are numbered from 1; a new one each time a listener is let go.
    public static let MAX_LIVE_KEY_ID = 1_000_000_000
    /// A push-to-talk channel's name, in Unicode scalars.
    public static let MAX_PTT_CHANNEL_NAME_CHARS = 64
    /// Push-to-talk channels one identity may be a member of.
    public static let MAX_PTT_CHANNELS_PER_IDENTITY = 50
    /// Peers one connection may watch for presence.
    public static let MAX_PRESENCE_PEERS = 500
    public static let MAX_PUSH_TOKEN_CHARS = 4_096
    public static let MAX_REPORT_DETAILS_CHARS = 2_000
    /// Messages one report may name (`messageIds`, plus `messageId`); a repeated report of
    /// the same identity adds its messages to the open one up to this bound.
    public static let MAX_REPORT_MESSAGE_IDS = 20
    /// The sealed contact list of one identity (`PUT /backup/contacts`), in bytes of
    /// ciphertext once base64-decoded.
    public static let MAX_CONTACTS_BACKUP_BYTES = 1_048_576
    /// Box overhead (Poly1305 tag) added to a text message's plaintext.
    public static let BOX_OVERHEAD_BYTES = 16

    /// The largest a message may be as it is stored and delivered (its whole
    /// `message_received` payload: ciphertext, signature, reactions, attachment pointer
    /// and every other field), whatever field makes it up.
    public static let MAX_STORED_MESSAGE_BYTES = 32_768
    /// A `pending_messages` page stops before its messages pass this many bytes (or at
    /// `limit` messages, whichever comes first); it always holds at least one message.
    public static let FETCH_PENDING_MAX_BYTES = 262_144
    /// The decoded ciphertext of one call signaling frame (an encrypted SDP offer or
    /// answer, or an ICE candidate). Video offers run to about 10 KB.
    public static let MAX_CALL_SIGNAL_BYTES = 32_768
    /// ICE candidates the caller sends while the call rings, kept for a callee who is
    /// woken by a push and fetches the call afterwards.
    public static let MAX_BUFFERED_CANDIDATES = 64

    public static let SUPPORTED_PROTOCOL_VERSIONS: Set<Int> = [1]
    /// 1: the original suite. 2: the same message cryptography with the
    /// domain-separated registration proof (`RegistrationProof`).
    public static let SUPPORTED_CRYPTO_VERSIONS: Set<Int> = [1, 2]
    /// The contacts backup's sealing (docs/protocol.md section 12, "Contacts backup": secretbox under `contactsKey`) has one
    /// version; version 2 of the suite changed the registration proof only. A blob that
    /// names another version is refused: no client could tell how to open it.
    public static let CONTACTS_BACKUP_CRYPTO_VERSIONS: Set<Int> = [1]
}
