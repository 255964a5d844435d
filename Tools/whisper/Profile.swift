import Foundation
import WhisperClient
import WhisperProtocol

/// What the command-line client keeps between runs, in one folder (0700): `identity.json`
/// (the mnemonic, IDs, server and session: whoever reads it is this user), `contacts.json`
/// and `groups.json`, each 0600 and replaced atomically (written aside, then renamed).
struct Profile {
    let directory: URL

    struct Identity: Codable {
        var version = 1
        var mnemonic: String
        var whisperId: String
        var deviceId: String
        var endpoints: WhisperEndpoints
        var sessionToken: String?
        var sessionExpiresAt: Int64?
        /// The third-party auditors this profile requires a word from (Ed25519 public
        /// keys, base64): a head none of them vouched for is refused (`notAudited`).
        var auditorKeys: [String]?
        /// The platform the device registers as (`init --platform`); nil in profiles made
        /// before the option: `android`.
        var platform: Platform?
    }

    struct Group: Codable {
        var groupId: String
        var title: String
        var memberIds: [String]
        var ownerId: String?

        init(_ created: GroupCreated) {
            (groupId, title, memberIds, ownerId) = (created.groupId, created.title, created.memberIds, created.ownerId)
        }

        init(_ updated: GroupUpdated) {
            (groupId, title, memberIds, ownerId) = (updated.groupId, updated.title, updated.memberIds, updated.ownerId)
        }
    }

    init(directory: URL) {
        self.directory = directory
    }

    /// `--home`, else `$WHISPER_HOME`, else `~/.whisper`.
    static func locate(_ home: String?) -> Profile {
        if let home { return Profile(directory: URL(fileURLWithPath: home)) }
        let environment = ProcessInfo.processInfo.environment
        if let home = environment["WHISPER_HOME"], !home.isEmpty { return Profile(directory: URL(fileURLWithPath: home)) }
        let user = environment["HOME"] ?? FileManager.default.homeDirectoryForCurrentUser.path
        return Profile(directory: URL(fileURLWithPath: user).appendingPathComponent(".whisper"))
    }

    private var identityURL: URL { directory.appendingPathComponent("identity.json") }
    private var contactsURL: URL { directory.appendingPathComponent("contacts.json") }
    private var groupsURL: URL { directory.appendingPathComponent("groups.json") }
    private var keyDirectoryURL: URL { directory.appendingPathComponent("key-directory.json") }

    var exists: Bool { FileManager.default.fileExists(atPath: identityURL.path) }

    /// Removes every file of the profile (after the identity was deleted on the server).
    func erase() throws {
        for url in [identityURL, contactsURL, groupsURL, keyDirectoryURL] where FileManager.default.fileExists(atPath: url.path) {
            try FileManager.default.removeItem(at: url)
        }
    }

    func identity() throws -> Identity {
        guard exists else {
            throw CLIFailure.noIdentity("no identity in \(directory.path): run `whisper init` (or `whisper init --recover`) first")
        }
        do {
            return try JSONDecoder().decode(Identity.self, from: Data(contentsOf: identityURL))
        } catch {
            throw CLIFailure.config("\(identityURL.path) is unreadable (\(error)); restore it or run `whisper init --recover --force`")
        }
    }

    func save(_ identity: Identity) throws { try write(identity, to: identityURL) }

    func contacts() throws -> [ContactsBackup.Contact] { try read([ContactsBackup.Contact].self, from: contactsURL) ?? [] }

    func save(contacts: [ContactsBackup.Contact]) throws { try write(contacts, to: contactsURL) }

    /// Adds `whisperId` to the contacts unless it is there already (a name given later
    /// replaces the old one).
    func remember(_ whisperId: String, name: String? = nil) throws {
        var list = try contacts()
        if let index = list.firstIndex(where: { $0.whisperId == whisperId }) {
            guard let name, list[index].displayName != name else { return }
            list[index].displayName = name
        } else {
            list.append(.init(whisperId: whisperId, addedAt: Clock.millisecondsNow(), displayName: name))
        }
        try save(contacts: list)
    }

    /// The name this profile's contacts give `whisperId`, if any.
    func name(of whisperId: String) -> String? {
        guard let name = (try? contacts())?.first(where: { $0.whisperId == whisperId })?.displayName, !name.isEmpty else { return nil }
        return name
    }

    /// `WSP-…` followed by the contact's name when it has one, for printing.
    func shown(_ whisperId: String) -> String { Self.shown(whisperId, name: name(of: whisperId)) }

    /// `WSP-…` followed by `name` when there is one (read once by a caller that uses it twice).
    static func shown(_ whisperId: String, name: String?) -> String {
        name.map { "\(whisperId) (\(Inbox.printable($0)))" } ?? whisperId
    }

    /// Whom a person means by what they typed: a Whisper ID (its checksum checked), else
    /// the name of exactly one contact (letter case aside).
    func recipient(_ typed: String) throws -> String {
        if let id = WhisperID.normalize(typed) { return id }
        let wanted = typed.trimmingCharacters(in: .whitespaces).lowercased()
        let named = wanted.isEmpty ? [] : try contacts().filter { ($0.displayName ?? "").lowercased() == wanted }
        switch named.count {
        case 1:
            return named[0].whisperId
        case 0:
            throw CLIFailure.badInput(
                "`\(typed)` is neither a Whisper ID (WSP-XXXX-XXXX-XXXX with a valid checksum; check for a typo) nor a contact's name (`whisper contacts list`)"
            )
        default:
            throw CLIFailure.badInput(
                "`\(typed)` names \(named.count) contacts (\(named.map(\.whisperId).joined(separator: ", "))): give the Whisper ID"
            )
        }
    }

    /// What this profile holds of the server's key directory: its keys (taken at first
    /// use) and the newest head checked, so that no later run accepts an older log.
    struct KeyDirectory: Codable {
        var keys: DirectoryKeys?
        var head: DirectoryHead?
        /// The keys proven for each peer (`DirectoryView.provenKeys`), base64: a later proof of
        /// other keys for one of them is refused (`peerKeysChanged`).
        var provenKeys: [String: String]?
    }

    func keyDirectory() throws -> KeyDirectory { try read(KeyDirectory.self, from: keyDirectoryURL) ?? KeyDirectory() }

    func save(keyDirectory: KeyDirectory) throws { try write(keyDirectory, to: keyDirectoryURL) }

    func groups() throws -> [String: Group] { try read([String: Group].self, from: groupsURL) ?? [:] }

    func save(group: Group) throws {
        var all = try groups()
        all[group.groupId] = group
        try write(all, to: groupsURL)
    }

    func forget(group groupId: String) throws {
        var all = try groups()
        guard all.removeValue(forKey: groupId) != nil else { return }
        try write(all, to: groupsURL)
    }

    // MARK: - Files

    private func read<T: Decodable>(_ type: T.Type, from url: URL) throws -> T? {
        guard FileManager.default.fileExists(atPath: url.path) else { return nil }
        do {
            return try JSONDecoder().decode(T.self, from: Data(contentsOf: url))
        } catch {
            throw CLIFailure.config("\(url.path) is unreadable (\(error))")
        }
    }

    /// Puts `data` at `url` with mode 0600 from the start, replacing what is there
    /// atomically: written beside it with open(2) and the mode (never readable by others,
    /// not even between creating the file and setting its permissions), then renamed over it.
    static func storePrivately(_ data: Data, at url: URL) throws {
        let aside = url.deletingLastPathComponent().appendingPathComponent(".\(url.lastPathComponent).\(getpid()).\(RandomID.uuid())")
        let descriptor = open(aside.path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard descriptor >= 0 else { throw CLIFailure.config("cannot create \(aside.path) (errno \(errno))") }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        do {
            try handle.write(contentsOf: data)
            try handle.synchronize()
            try handle.close()
        } catch {
            try? FileManager.default.removeItem(at: aside)
            throw error
        }
        guard rename(aside.path, url.path) == 0 else {
            let code = errno
            try? FileManager.default.removeItem(at: aside)
            throw CLIFailure.config("cannot replace \(url.path) (errno \(code))")
        }
    }

    /// Encodes `value` into `url` (`storePrivately`), making the folder (0700) first.
    private func write<T: Encodable>(_ value: T, to url: URL) throws {
        let manager = FileManager.default
        do {
            if !manager.fileExists(atPath: directory.path) {
                try manager.createDirectory(at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            try Self.storePrivately(try encoder.encode(value), at: url)
        } catch let failure as CLIFailure {
            throw failure
        } catch {
            throw CLIFailure.config("cannot write \(url.path): \(error)")
        }
    }
}
