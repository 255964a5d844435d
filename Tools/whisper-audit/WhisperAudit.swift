import ArgumentParser
import Foundation
import WhisperClient
import WhisperProtocol

/// Audits a server's key directory from outside (``DirectoryAuditor``); exits 1 with the
/// finding, or when the newest head is too old. With `--serve` it keeps following and
/// signs each head it verified for clients that require an auditor (`POST /kt/audits`).
@main
struct WhisperAudit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "whisper-audit", abstract: "Check every epoch of a Whisper server's key directory."
    )

    @Option(help: "The server's auth base URL (http://127.0.0.1:8081), or its edge origin (https://chat.example.org).")
    var server: String

    @Option(help: ArgumentHelp("A file holding the directory's keys as JSON (what GET /kt/keys answers), to check against instead of asking the server.", valueName: "path"))
    var keys: String?

    @Flag(help: "Keep following new epochs instead of stopping at the newest.")
    var follow = false

    @Option(help: "Seconds between looks for new epochs when following.")
    var interval = 5

    @Option(help: "The oldest the newest head may be, in seconds, before the view counts as frozen (the directory publishes at least hourly).")
    var maxHeadAge = Int(KeyDirectory.staleHeadAge.components.seconds)

    @Flag(help: "Run as a third-party auditor: follow, and sign each newest head verified with --auditor-key, delivering the signature to the server.")
    var serve = false

    @Option(help: "The auditor's Ed25519 key: a file holding its 32-byte seed in base64, made when missing (readable by its owner alone). The server's operator must never hold it.")
    var auditorKey: String?

    @Option(help: "With --serve: seconds after which the newest head is signed again although no epoch came (its signature stays recent).")
    var resignAfter = 600

    @Flag(help: "Print the auditor's public key (base64, for the server's AUTH_KT_AUDITOR_KEYS) and exit.")
    var printPublicKey = false

    func run() async throws {
        let signer = try auditorKey.map(Self.auditorKeyPair(at:))
        if printPublicKey {
            guard let signer else { throw ValidationError("--print-public-key needs --auditor-key") }
            say(Data(signer.publicKey).base64EncodedString())
            return
        }
        if serve, signer == nil { throw ValidationError("--serve needs --auditor-key") }
        let follow = self.follow || serve
        var signed: (epoch: Int64, at: ContinuousClock.Instant)?
        let base = server.hasSuffix("/") ? String(server.dropLast()) : server
        let pinned = try keys.map { try JSONDecoder().decode(DirectoryKeys.self, from: Data(contentsOf: URL(fileURLWithPath: $0))) }
        let api = WhisperAPI(
            endpoints: WhisperEndpoints(websocket: "ws://unused/ws", auth: base, attachments: base, turn: base),
            directory: DirectoryView(keys: pinned)
        )
        let auditor = DirectoryAuditor(keys: try await api.directoryKeys())
        repeat {
            do {
                let checked = try await auditor.follow(api)
                if checked > 0 || !follow {
                    let epoch = await auditor.epoch, added = await auditor.added, deleted = await auditor.deleted
                    say("checked \(checked) epoch(s); up to epoch \(epoch): \(added) entries added, \(deleted) deleted, every check passed")
                }
            } catch let finding as DirectoryAuditor.Finding {
                say("FAILED: \(finding)")
                throw ExitCode(1)
            }
            // A directory that stops publishing freezes every client's view at its last head.
            if let head = await auditor.head, Double(head.age()) > Double(maxHeadAge) * 1_000 {
                let age = head.age() / 1_000
                say("STALE: the newest head, epoch \(head.epoch), was published \(age) s ago (more than \(maxHeadAge) s): clients refuse it as staleHead")
                throw ExitCode(1)
            }
            // Every check passed up to this head: the auditor's word on it.
            if let signer, let head = await auditor.head,
               signed.map({ $0.epoch < head.epoch || ContinuousClock.now - $0.at >= .seconds(resignAfter) }) ?? true {
                do {
                    try await api.submit(AuditorSignature(signing: head, with: signer))
                    signed = (head.epoch, .now)
                    say("signed epoch \(head.epoch)")
                } catch {
                    // The server unreachable or refusing: tried again at the next look.
                    say("could not deliver the signature of epoch \(head.epoch): \(error)")
                }
            }
            if follow { try await Task.sleep(for: .seconds(interval)) }
        } while follow
    }

    /// Writes a line at once, also into a file or a pipe (where `print` would hold it in a
    /// buffer): an auditor's log is read while it runs.
    func say(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    /// The auditor's key pair from the seed in `path`, which is made (0600) when missing.
    static func auditorKeyPair(at path: String) throws -> Ed25519.KeyPair {
        let url = URL(fileURLWithPath: path)
        if !FileManager.default.fileExists(atPath: path) {
            let seed = Data(SecureBytes.random(32)).base64EncodedString()
            guard FileManager.default.createFile(atPath: path, contents: Data((seed + "\n").utf8), attributes: [.posixPermissions: 0o600]) else {
                throw ValidationError("cannot write the auditor's key to \(path)")
            }
        }
        let text = try String(contentsOf: url, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        guard let seed = Data(base64Encoded: text), seed.count == 32 else {
            throw ValidationError("\(path) must hold the auditor's 32-byte seed in base64")
        }
        return Ed25519.KeyPair(seed: Array(seed))
    }
}
