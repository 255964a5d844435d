import Crypto
import Logging
import NIOCore
import PostgresNIO
import WhisperShared

/// Listener profiles (docs/protocol.md section 13, "Listener profiles"), kept in Postgres:
/// which listener devices are one person, its name, and the codes that let one more
/// device in. A device with no row is alone in the profile named by its device ID;
/// its first change (a name, a code) gives it rows. `live_listeners` names profiles.
struct LiveProfiles: Sendable {
    let postgres: PostgresClient
    let redis: RedisClient
    let logger: Logger
    static let maxDevices = 10
    static let maxCodes = 3
    static let codeLifetime: Duration = .seconds(600)

    // MARK: - Frames

    /// A profile as it stands, and its devices (whom a change is told to).
    struct Standing: Sendable {
        var profile: LiveProfile
        var devices: Set<String>
    }

    func profile(of device: String) async throws -> LiveProfile {
        try await postgres.withConnection { try await Self.standing(of: device, on: $0, logger: logger).profile }
    }

    func rename(_ request: LiveProfileRename, device: String, asker: String) async throws -> LiveProfile {
        let standing = try await postgres.withTransaction(refusing: WhisperError.self, logger: logger) { connection in
            let id = try await Self.ownRows(device, on: connection, logger: logger)
            _ = try await connection.query(
                "UPDATE live_profiles SET name = \(request.name), updated_at = now() WHERE profile_id = \(id)", logger: logger
            )
            return try await Self.standing(id: id, on: connection, logger: logger)
        }
        await tell(standing, except: asker)
        return standing.profile
    }

    /// A new code for the device's profile, kept as a digest; refused past `maxCodes`
    /// waiting (under the profile's row lock).
    func share(device: String) async throws -> LiveProfileCode {
        let code = PTTJoinCode.make()
        let expiresAt = Clock.millisecondsNow() + Int64(Self.codeLifetime.milliseconds)
        try await postgres.withTransaction(refusing: WhisperError.self, logger: logger) { connection in
            let id = try await Self.ownRows(device, on: connection, logger: logger)
            _ = try await connection.query("SELECT 1 FROM live_profiles WHERE profile_id = \(id) FOR UPDATE", logger: logger)
            _ = try await connection.query("DELETE FROM live_profile_codes WHERE profile_id = \(id) AND expires_at <= now()", logger: logger)
            guard try await connection.count("SELECT count(*)::bigint FROM live_profile_codes WHERE profile_id = \(id)", logger: logger)
                < Self.maxCodes else {
                throw WhisperError(.forbidden, "a profile has at most \(Self.maxCodes) codes waiting; use one or let one expire")
            }
            _ = try await connection.query(
                """
                INSERT INTO live_profile_codes (code_digest, profile_id, expires_at)
                VALUES (\(Self.digest(code)), \(id), to_timestamp(\(Double(expiresAt) / 1_000)))
                """,
                logger: logger
            )
        }
        return LiveProfileCode(code: code, expiresAt: expiresAt)
    }

    /// Moves the device into the profile a code was made for, and uses the code up.
    /// An unknown or expired code is `NOT_FOUND` (the route counts it as a guess). The
    /// profile it leaves, once it has no device, goes with the conversations that let it in.
    func join(_ request: LiveProfileJoin, device: String, asker: String) async throws -> LiveProfile {
        let standing = try await postgres.withTransaction(refusing: WhisperError.self, logger: logger) { connection in
            let found = try await connection.query(
                "SELECT profile_id FROM live_profile_codes WHERE code_digest = \(Self.digest(request.code)) AND expires_at > now() FOR UPDATE",
                logger: logger
            )
            var target: String?
            for try await id in found.decode(String.self) { target = id }
            guard let target else { throw WhisperError(.notFound, "no such code, or it has expired") }
            _ = try await connection.query("SELECT 1 FROM live_profiles WHERE profile_id = \(target) FOR UPDATE", logger: logger)
            let current = try await Self.profileID(of: device, on: connection, logger: logger)
            if current != target {
                guard try await connection.count("SELECT count(*)::bigint FROM live_profile_devices WHERE profile_id = \(target)", logger: logger)
                    < Self.maxDevices else {
                    throw WhisperError(.forbidden, "a profile has at most \(Self.maxDevices) devices; let one leave first")
                }
                _ = try await connection.query(
                    """
                    INSERT INTO live_profile_devices (device_id, profile_id) VALUES (\(device), \(target))
                    ON CONFLICT (device_id) DO UPDATE SET profile_id = EXCLUDED.profile_id, joined_at = now()
                    """,
                    logger: logger
                )
                try await Self.dropIfEmpty(current, on: connection, logger: logger)
            }
            _ = try await connection.query("DELETE FROM live_profile_codes WHERE code_digest = \(Self.digest(request.code))", logger: logger)
            return try await Self.standing(id: target, on: connection, logger: logger)
        }
        await tell(standing, except: asker)
        return standing.profile
    }

    /// The device leaves its profile for a new one of its own; a device alone keeps its.
    func leave(device: String, asker: String) async throws -> LiveProfile {
        let (standing, left) = try await postgres.withTransaction(refusing: WhisperError.self, logger: logger) { connection -> (Standing, Standing?) in
            let current = try await Self.standing(of: device, on: connection, logger: logger)
            guard current.devices.count > 1 else { return (current, nil) }
            try await Self.giveNewProfile(to: device, on: connection, logger: logger)
            return (
                try await Self.standing(of: device, on: connection, logger: logger),
                try await Self.standing(id: current.profile.profileId, on: connection, logger: logger)
            )
        }
        await tell(standing, except: asker)
        if let left { await tell(left, except: asker) }
        return standing.profile
    }

    /// The device's profile goes with its name, codes and the conversations that let it
    /// in; each of its devices gets a new profile of its own (never the old ID again).
    func delete(device: String, asker: String) async throws -> LiveProfile {
        let fresh = try await postgres.withTransaction(refusing: WhisperError.self, logger: logger) { connection -> [Standing] in
            let current = try await Self.standing(of: device, on: connection, logger: logger)
            try await Self.remove(current.profile.profileId, on: connection, logger: logger)
            var fresh = [Standing]()
            for each in [device] + current.devices.subtracting([device]) {
                try await Self.giveNewProfile(to: each, on: connection, logger: logger)
                fresh.append(try await Self.standing(of: each, on: connection, logger: logger))
            }
            return fresh
        }
        for standing in fresh { await tell(standing, except: asker) }
        return fresh[0].profile
    }

    // MARK: - Telling a profile's other sockets

    /// Every gateway hears profile changes here and writes them to its sockets of the
    /// profile's devices (`ControlChannel`).
    static let channel = "live:profiles"

    /// Tells every socket of the profile's devices, on every gateway, but the one that
    /// asked (it has its answer), the profile as it now is. Lost with pub/sub at worst:
    /// a device sees the change at its next `live_profile_get`.
    private func tell(_ standing: Standing, except asker: String) async {
        guard !standing.devices.isEmpty else { return }
        let message = Array("\(asker) \(standing.devices.sorted().joined(separator: ",")) ".utf8) + ServerFrameCodec.encode(standing.profile)
        do {
            _ = try await redis.send("PUBLISH", Self.channel, message)
        } catch {
            logger.warning("live_profile_tell_failed", metadata: ["error": "\(error)"])
        }
    }

    /// A message of `channel`: the frame for every socket here of the devices it names,
    /// but the asker's; an unreadable one is dropped.
    static func deliver(_ message: [UInt8], to connections: ConnectionRegistry) {
        let parts = message.split(separator: UInt8(ascii: " "), maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3 else { return }
        let asker = String(decoding: parts[0], as: UTF8.self)
        let frame = Array(parts[2])
        for device in parts[1].split(separator: UInt8(ascii: ",")).prefix(maxDevices) {
            for socket in connections.sockets(ofListenerDevice: String(decoding: device, as: UTF8.self)) where socket.id != asker {
                socket.sendRaw(frame)
            }
        }
    }

    // MARK: - For the live sequence

    /// The profile `listener` (a device ID, as the Whisperer names listeners) is in, and
    /// every device of that profile (`listener` among them).
    func people(_ listener: String) async throws -> (profileId: String, devices: Set<String>) {
        try await postgres.withConnection { connection in
            let id = try await Self.profileID(of: listener, on: connection, logger: logger)
            return (id, try await Self.devices(of: id, on: connection, logger: logger).union([listener]))
        }
    }

    // MARK: - Rows

    static func profileID(of device: String, on connection: PostgresConnection, logger: Logger) async throws -> String {
        for try await id in try await connection.query(
            "SELECT live_profile_of(\(device))", logger: logger
        ).decode(String.self) { return id }
        return device
    }

    static func standing(of device: String, on connection: PostgresConnection, logger: Logger) async throws -> Standing {
        try await standing(id: try await profileID(of: device, on: connection, logger: logger), on: connection, logger: logger)
    }

    static func standing(id: String, on connection: PostgresConnection, logger: Logger) async throws -> Standing {
        var name: String?
        for try await row in try await connection.query("SELECT name FROM live_profiles WHERE profile_id = \(id)", logger: logger).decode(String?.self) {
            name = row
        }
        let devices = try await devices(of: id, on: connection, logger: logger)
        return Standing(profile: LiveProfile(profileId: id, name: name, devices: devices.count), devices: devices)
    }

    /// The devices of a profile: its rows, or the device alone whose ID names it.
    static func devices(of profileId: String, on connection: PostgresConnection, logger: Logger) async throws -> Set<String> {
        let rows = try await connection.query(
            """
            SELECT device_id FROM live_profile_devices WHERE profile_id = \(profileId)
            UNION SELECT \(profileId) WHERE NOT EXISTS (SELECT 1 FROM live_profile_devices WHERE device_id = \(profileId))
              AND NOT EXISTS (SELECT 1 FROM live_profiles WHERE profile_id = \(profileId))
            """,
            logger: logger
        )
        var found: Set<String> = []
        for try await id in rows.decode(String.self) { found.insert(id) }
        return found
    }

    /// Gives a device alone in the profile its ID names the rows of that profile; its
    /// profile's ID either way.
    private static func ownRows(_ device: String, on connection: PostgresConnection, logger: Logger) async throws -> String {
        let id = try await profileID(of: device, on: connection, logger: logger)
        guard id == device else { return id }
        _ = try await connection.query("INSERT INTO live_profiles (profile_id) VALUES (\(id)) ON CONFLICT DO NOTHING", logger: logger)
        _ = try await connection.query(
            "INSERT INTO live_profile_devices (device_id, profile_id) VALUES (\(device), \(id)) ON CONFLICT DO NOTHING", logger: logger
        )
        return id
    }

    private static func giveNewProfile(to device: String, on connection: PostgresConnection, logger: Logger) async throws {
        let id = RandomID.uuid()
        _ = try await connection.query("INSERT INTO live_profiles (profile_id) VALUES (\(id))", logger: logger)
        _ = try await connection.query(
            """
            INSERT INTO live_profile_devices (device_id, profile_id) VALUES (\(device), \(id))
            ON CONFLICT (device_id) DO UPDATE SET profile_id = EXCLUDED.profile_id, joined_at = now()
            """,
            logger: logger
        )
    }

    /// A profile no device is in any more goes, with the conversations that let it in.
    private static func dropIfEmpty(_ profileId: String, on connection: PostgresConnection, logger: Logger) async throws {
        guard try await devices(of: profileId, on: connection, logger: logger).isEmpty else { return }
        try await remove(profileId, on: connection, logger: logger)
    }

    /// A profile and what it holds: the conversations' record of letting it in, its name,
    /// its devices' rows and its codes (those two by the foreign keys' cascade).
    private static func remove(_ profileId: String, on connection: PostgresConnection, logger: Logger) async throws {
        _ = try await connection.query("DELETE FROM live_listeners WHERE listener_id = \(profileId)", logger: logger)
        _ = try await connection.query("DELETE FROM live_profiles WHERE profile_id = \(profileId)", logger: logger)
    }

    private static func digest(_ code: String) -> ByteBuffer { ByteBuffer(bytes: SHA256.hash(data: Array(code.utf8))) }
}
