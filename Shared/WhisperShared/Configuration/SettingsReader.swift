import Foundation
import Configuration

/// Raised at start when settings are missing or malformed; names every offending
/// environment variable at once so an operator can fix them in one go.
public struct ConfigurationError: Error, CustomStringConvertible, Sendable {
    public var missing: [String]
    public var invalid: [String]

    public var description: String {
        var parts: [String] = []
        if !missing.isEmpty { parts.append("missing required settings: " + missing.joined(separator: ", ")) }
        if !invalid.isEmpty { parts.append("invalid settings: " + invalid.joined(separator: "; ")) }
        return parts.joined(separator: "; ")
    }
}

/// Reads settings through swift-configuration and collects every problem instead of
/// stopping at the first one. Keys are dotted (`gateway.http.port`); with the
/// environment provider they are read from upper-case variables (`GATEWAY_HTTP_PORT`).
public final class SettingsReader {
    private let reader: ConfigReader
    private(set) var missing: [String] = []
    private(set) var invalid: [String] = []
    /// Older variable names that were set and read in place of their current name
    /// (logged at start, so an operator can rename them).
    public private(set) var olderNamesUsed: [(older: String, current: String)] = []

    public init(reader: ConfigReader) {
        self.reader = reader
    }

    /// Settings from the process environment (the production source).
    public static func environment() -> SettingsReader {
        SettingsReader(reader: ConfigReader(provider: EnvironmentVariablesProvider()))
    }

    /// Settings from a fixed set of environment-style variables (tests, tools).
    public static func environment(_ variables: [String: String]) -> SettingsReader {
        SettingsReader(reader: ConfigReader(provider: EnvironmentVariablesProvider(environmentVariables: variables)))
    }

    /// The environment variable a key is read from, for messages and docs.
    public static func variableName(_ key: String) -> String {
        var name = ""
        var previousWasLower = false
        for character in key {
            if character == "." || character == "-" {
                name.append("_")
                previousWasLower = false
            } else if character.isUppercase {
                if previousWasLower { name.append("_") }
                name.append(character)
                previousWasLower = false
            } else {
                name.append(contentsOf: character.uppercased())
                previousWasLower = character.isLowercase || character.isNumber
            }
        }
        return name
    }

    /// What marks every secret in the repository's examples (deploy/compose.env.example);
    /// a secret setting that holds it is refused, so no deployment runs on a token that
    /// anyone can read (scripts/check-deploy checks that each example secret carries it).
    public static let exampleSecretMarker = "change-me"

    private func raw(_ key: String, secret: Bool) -> String? {
        guard let value = reader.string(forKey: ConfigKey(key), isSecret: secret) else { return nil }
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        if secret, trimmed.lowercased().contains(Self.exampleSecretMarker) {
            invalid.append("\(Self.variableName(key)) holds an example value shipped in the repository; make a secret (openssl rand -base64 32)")
        }
        return trimmed.isEmpty ? nil : trimmed
    }

    public func string(_ key: String, default defaultValue: String, secret: Bool = false) -> String {
        raw(key, secret: secret) ?? defaultValue
    }

    public func optionalString(_ key: String, secret: Bool = false) -> String? {
        raw(key, secret: secret)
    }

    /// A setting without which the service cannot run; recorded as missing when absent.
    public func requiredString(_ key: String, secret: Bool = false) -> String {
        guard let value = raw(key, secret: secret) else {
            missing.append(Self.variableName(key))
            return ""
        }
        return value
    }

    public func int(_ key: String, default defaultValue: Int, range: ClosedRange<Int>? = nil) -> Int {
        guard let text = raw(key, secret: false) else { return defaultValue }
        guard let value = Int(text), range.map({ $0.contains(value) }) ?? true else {
            let bounds = range.map { " (\($0.lowerBound)...\($0.upperBound))" } ?? ""
            invalid.append("\(Self.variableName(key)) must be a whole number\(bounds)")
            return defaultValue
        }
        return value
    }

    public func double(_ key: String, default defaultValue: Double, range: ClosedRange<Double>? = nil) -> Double {
        guard let text = raw(key, secret: false) else { return defaultValue }
        guard let value = Double(text), value.isFinite, range.map({ $0.contains(value) }) ?? true else {
            invalid.append("\(Self.variableName(key)) must be a number")
            return defaultValue
        }
        return value
    }

    public func bool(_ key: String, default defaultValue: Bool) -> Bool {
        guard let text = raw(key, secret: false)?.lowercased() else { return defaultValue }
        switch text {
        case "1", "true", "yes", "on": return true
        case "0", "false", "no", "off": return false
        default:
            invalid.append("\(Self.variableName(key)) must be true or false")
            return defaultValue
        }
    }

    public func list(_ key: String, default defaultValue: [String], secret: Bool = false) -> [String] {
        guard let text = raw(key, secret: secret) else { return defaultValue }
        return text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    /// Required 32-byte keys written base64 (`openssl rand -base64 32`), comma separated,
    /// at least one; nil (the setting noted as invalid) when missing or malformed.
    public func requiredSeeds(_ key: String) -> [[UInt8]]? {
        let texts = list(key, default: [], secret: true)
        guard !texts.isEmpty else {
            _ = requiredString(key, secret: true)
            return nil
        }
        let seeds = texts.compactMap { Data(base64Encoded: $0).map(Array.init) }.filter { $0.count == 32 }
        guard seeds.count == texts.count else {
            reject(key, because: "must be base64 32-byte keys, comma separated (make one with: openssl rand -base64 32)")
            return nil
        }
        return seeds
    }

    /// A rate limit written `<count>/<period>` (`20/60s`, `10/1m`, `1000/1h`); the
    /// service's rules read theirs through `LimitRules`.
    public func rateLimit(_ key: String, default defaultValue: RateLimitRule) -> RateLimitRule {
        guard let text = raw(key, secret: false) else { return defaultValue }
        guard let rule = RateLimitRule(text) else {
            reject(key, because: "must look like 20/60s (count/period with s, m or h; at most 1000000000 per 366 days)")
            // Only reached with an invalid setting, which `validate()` then reports.
            return defaultValue
        }
        return rule
    }

    /// A duration set in whole seconds.
    public func seconds(_ key: String, default defaultValue: Duration, range: ClosedRange<Int>) -> Duration {
        .seconds(int(key, default: Int(defaultValue.milliseconds / 1_000), range: range))
    }

    /// A duration set in milliseconds.
    public func milliseconds(_ key: String, default defaultValue: Duration, range: ClosedRange<Int>) -> Duration {
        .milliseconds(int(key, default: Int(defaultValue.milliseconds), range: range))
    }

    /// The key to read for a setting that was renamed: `current` when it is set (or
    /// nothing is), else the first of `older` that is set, which is noted in
    /// `olderNamesUsed`.
    public func key(_ current: String, olderNames older: [String]) -> String {
        if raw(current, secret: false) != nil { return current }
        guard let used = older.first(where: { raw($0, secret: false) != nil }) else { return current }
        olderNamesUsed.append((Self.variableName(used), Self.variableName(current)))
        return used
    }

    /// Records a problem found while interpreting a value (a bad URL, say).
    public func reject(_ key: String, because reason: String) {
        invalid.append("\(Self.variableName(key)) \(reason)")
    }

    /// Throws when anything was missing or invalid.
    public func validate() throws {
        if !missing.isEmpty || !invalid.isEmpty {
            throw ConfigurationError(missing: missing, invalid: invalid)
        }
    }
}
