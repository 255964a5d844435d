import ArgumentParser
import Foundation
import WhisperClient
import WhisperProtocol

/// A failure the person at the terminal can act on, with the exit code scripts test
/// (sysexits.h values, documented in docs/sdk.md).
enum CLIFailure: Error, CustomStringConvertible {
    /// 65: input that cannot be right (a mistyped Whisper ID, an empty message).
    case badInput(String)
    /// 67: a well-formed Whisper ID the server does not know (never registered there, or
    /// deleted; said apart when this profile had its keys proven before).
    case noSuchIdentity(String)
    /// 78: no identity here yet, or its files are damaged.
    case noIdentity(String)
    case config(String)
    /// 69: the server could not be reached or stopped answering.
    case unavailable(String)
    /// 75: the server said to try later (rate limited, draining).
    case tryLater(String)
    /// 77: the session ended (another device signed in, banned) or the server forbids it.
    case notAllowed(String)
    /// 1: the server refused the request for another reason (its code is in the message).
    case refused(String)

    var exitCode: Int32 {
        switch self {
        case .badInput: 65
        case .noSuchIdentity: 67
        case .noIdentity, .config: 78
        case .unavailable: 69
        case .tryLater: 75
        case .notAllowed: 77
        case .refused: 1
        }
    }

    var description: String {
        switch self {
        case .badInput(let text), .noSuchIdentity(let text), .noIdentity(let text), .config(let text), .unavailable(let text), .tryLater(let text),
             .notAllowed(let text), .refused(let text):
            text
        }
    }

    /// What an SDK error means for the person running the command.
    static func from(_ error: any Error, doing what: String) -> CLIFailure {
        switch error {
        case let failure as CLIFailure:
            return failure
        case let error as WhisperClientError:
            switch error {
            case .refused(let code, let message):
                return from(code: code, message: message, doing: what)
            case .closed(let code):
                if code == 4001 {
                    return .notAllowed("\(what): the session was revoked (another device signed in with this phrase, or the identity is banned)")
                }
                return .unavailable("\(what): the server closed the connection\(code.map { " (code \($0))" } ?? "")")
            case .timedOut:
                return .unavailable("\(what): no answer from the server within the time limit")
            case .notConnected:
                return .unavailable("\(what): not connected")
            case .unexpectedReply(let type):
                return .refused("\(what): unexpected answer `\(type)` from the server")
            case .notListenerDevice:
                return .config("\(what): no listener device")
            case .noIdentity:
                return .config("\(what): this needs an identity (`whisper register` or `whisper recover`)")
            }
        case KeyTransparencyError.notYetPublished:
            return .tryLater("\(what): the identity is not in the key directory yet (registered moments ago); try again in a few seconds")
        case KeyTransparencyError.staleHead(let epoch, let publishedAt):
            let minutes = max(0, DirectoryHead.age(publishedAt: publishedAt)) / 60_000
            return .refused(
                "\(what): the key directory's newest head (epoch \(epoch)) is \(minutes) minutes old, and a directory publishes at least hourly: "
                    + "this server may be keeping you on an old view; do not trust keys it serves until it publishes again"
            )
        case KeyTransparencyError.ownEntryHidden:
            return .refused(
                "\(what): the key directory no longer shows you your own entry, which it proved before: "
                    + "the server may be hiding it from you while serving others other keys"
            )
        case KeyTransparencyError.peerKeysChanged(let whisperId):
            return .refused(
                "\(what): the key directory now proves other keys for \(whisperId) than it proved to you before; keys never change, "
                    + "so someone was given keys that are not \(whisperId)'s: do not send to them until you have compared keys in person"
            )
        case KeyTransparencyError.notAudited:
            return .refused(
                "\(what): none of the auditors you require signed a recent head of this server's key directory: "
                    + "nobody but the operator vouches for the keys it serves; do not trust them until an auditor does"
            )
        case KeyTransparencyError.splitView(let peer):
            return .refused(
                "\(what): \(peer) was shown another key directory than you (their head is not on your log): "
                    + "the server may be showing the two of you different keys; compare `whisper keys --verify` in person"
            )
        case let error as KeyTransparencyError:
            return .refused("\(what): the key directory's proof failed (\(error)); do not trust these keys, and see docs/key-transparency.md")
        case let error as WhisperAPIError:
            switch error {
            case .refused(let status, let code, let message):
                if let code { return from(code: code, message: message, doing: what) }
                return .refused("\(what): HTTP \(status) \(message)")
            case .retryLater(let status, let seconds):
                return .tryLater("\(what): the server is busy (HTTP \(status)); try again\(seconds.map { " in \($0) s" } ?? " later")")
            case .unreadableResponse(let detail):
                return .refused("\(what): unreadable answer (\(detail))")
            case .storage(let status):
                return .unavailable("\(what): the attachment store answered HTTP \(status)")
            }
        case let error as MessageCryptoError:
            return .refused("\(what): \(error == .badSignature ? "bad signature" : "cannot decrypt")")
        default:
            // Anything else is the way to the server (refused, unreachable, cut, TLS).
            return .unavailable("\(what): the server could not be reached or stopped answering (\(String(describing: error).prefix(160)))")
        }
    }

    /// Why the session ended (`session_revoked`'s reason, or a `SignOutReason`), and what
    /// the person can do: `whisper signin` takes the identity back, except from a ban
    /// (refused while it lasts) or a deletion (the identity is gone).
    static func sessionEnded(_ reason: String) -> String {
        switch reason {
        case SignOutReason.banned.rawValue:
            "the session ended: the identity is banned by this server's operator, and `whisper signin` is refused while the ban lasts"
        case SignOutReason.deleted.rawValue:
            "the session ended: the identity was deleted, and cannot be signed in again"
        default:
            "the session ended (\(reason)); `whisper signin` takes the identity back to this device"
        }
    }

    /// A server that could not be reached at `address`, in words: the transport's own
    /// error only as a short detail.
    static func unreachable(_ address: String, _ error: any Error) -> CLIFailure {
        .unavailable("cannot reach \(address): the server could not be reached or stopped answering (is the address right, and is it up?); detail: \(String(describing: error).prefix(120))")
    }

    static func from(code: ErrorCode, message: String, doing what: String) -> CLIFailure {
        let text = "\(what): \(code.rawValue): \(message)"
        switch code {
        case .rateLimited: return .tryLater(text)
        case .forbidden, .userBanned: return .notAllowed(text)
        case .invalidPayload, .invalidTimestamp: return .badInput(text)
        default: return .refused(text)
        }
    }
}

extension AsyncParsableCommand {
    /// Runs `body`; a failure is printed to stderr as `whisper: <what went wrong>` and
    /// ends the process with its exit code.
    func guarded(_ what: String, _ body: () async throws -> Void) async throws {
        do {
            try await body()
        } catch let exit as ExitCode {
            throw exit
        } catch {
            let failure = CLIFailure.from(error, doing: what)
            FileHandle.standardError.write(Data("whisper: \(failure.description)\n".utf8))
            throw ExitCode(failure.exitCode)
        }
    }
}
