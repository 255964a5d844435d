/// For a type that holds a secret (a key, a token, a password): printing a value of it,
/// or of anything that contains it, shows the type's name and nothing else. Swift prints
/// a struct's fields when asked for its description, and libraries do ask: ServiceLifecycle
/// logs every service it starts at `debug`, fields and all, which put the object
/// store's secret key into gc-worker's log (found by `LogHygieneTests`).
public protocol RedactedDescription: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {}

extension RedactedDescription {
    public var description: String { "\(Self.self)(redacted)" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: [:], displayStyle: .struct) }
}
