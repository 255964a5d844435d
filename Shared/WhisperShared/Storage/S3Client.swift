import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import NIOHTTP1

/// The object store's settings, shared by attachment-signer and gc-worker:
/// `WHISPER_S3_ENDPOINT`, `WHISPER_S3_REGION`, `WHISPER_S3_BUCKET`,
/// `WHISPER_S3_ACCESS_KEY_ID`, `WHISPER_S3_SECRET_ACCESS_KEY`, `WHISPER_S3_PATH_STYLE`,
/// and `WHISPER_S3_PUBLIC_ENDPOINT` (the address clients use, when it differs).
public struct S3Settings: Sendable {
    public var location: S3Location
    /// The same store as clients reach it (the URLs handed out are signed for it).
    public var publicLocation: S3Location
    public var accessKeyId: String
    public var secretAccessKey: String

    public init(location: S3Location, publicLocation: S3Location? = nil, accessKeyId: String, secretAccessKey: String) {
        self.location = location
        self.publicLocation = publicLocation ?? location
        self.accessKeyId = accessKeyId
        self.secretAccessKey = secretAccessKey
    }

    public init(from settings: SettingsReader) {
        let endpoint = settings.requiredString("whisper.s3.endpoint")
        if !endpoint.isEmpty, !(endpoint.hasPrefix("http://") || endpoint.hasPrefix("https://")) {
            settings.reject("whisper.s3.endpoint", because: "must be an http:// or https:// URL")
        }
        let region = settings.string("whisper.s3.region", default: "us-east-1")
        let bucket = settings.requiredString("whisper.s3.bucket")
        let pathStyle = settings.bool("whisper.s3.path.style", default: false)
        location = S3Location(endpoint: endpoint, region: region, bucket: bucket, pathStyle: pathStyle)
        let publicEndpoint = settings.string("whisper.s3.public.endpoint", default: endpoint)
        publicLocation = S3Location(endpoint: publicEndpoint, region: region, bucket: bucket, pathStyle: pathStyle)
        accessKeyId = settings.requiredString("whisper.s3.access.key.id", secret: true)
        secretAccessKey = settings.requiredString("whisper.s3.secret.access.key", secret: true)
    }

    /// Signs what the services send the store themselves.
    public var signer: S3Signer { S3Signer(location: location, accessKeyId: accessKeyId, secretAccessKey: secretAccessKey) }
    /// Signs the URLs handed to clients.
    public var publicSigner: S3Signer { S3Signer(location: publicLocation, accessKeyId: accessKeyId, secretAccessKey: secretAccessKey) }
}

/// The few object-store calls the services make themselves, signed with SigV4.
public struct S3Client: Sendable {
    public let signer: S3Signer
    let timeout: TimeAmount = .seconds(15)

    public init(signer: S3Signer) {
        self.signer = signer
    }

    /// What the store holds under a key.
    public struct ObjectInfo: Sendable, Equatable {
        public var size: Int64
        public var contentType: String?
    }

    /// `HEAD` of an object: nil when there is none.
    public func head(_ key: String) async throws -> ObjectInfo? {
        let response = try await send("HEAD", key: key)
        switch response.status.code {
        case 200:
            let size = response.headers.first(name: "content-length").flatMap { Int64($0) } ?? -1
            return ObjectInfo(size: size, contentType: response.headers.first(name: "content-type"))
        case 404:
            return nil
        default:
            throw S3Error(operation: "HEAD", status: Int(response.status.code))
        }
    }

    /// Deletes an object; a missing one counts as deleted.
    public func delete(_ key: String) async throws {
        let response = try await send("DELETE", key: key)
        guard (200..<300).contains(response.status.code) || response.status.code == 404 else {
            throw S3Error(operation: "DELETE", status: Int(response.status.code))
        }
    }

    /// Creates the bucket unless it is there (for local stores set up by scripts/up and tests).
    public func ensureBucket() async throws {
        let response = try await send("PUT", key: "")
        guard (200..<300).contains(response.status.code) || response.status.code == 409 else {
            throw S3Error(operation: "create bucket", status: Int(response.status.code))
        }
    }

    /// `PUT` of a small object (tests and tools).
    public func put(_ key: String, body: [UInt8], contentType: String) async throws {
        let hash = Array(SHA256.hash(data: body)).hexString
        let response = try await send("PUT", key: key, headers: ["Content-Type": contentType, "Content-Length": String(body.count)], body: body, payloadHash: hash)
        guard (200..<300).contains(response.status.code) else { throw S3Error(operation: "PUT", status: Int(response.status.code)) }
    }

    private func send(_ method: String, key: String, headers: [String: String] = [:], body: [UInt8]? = nil, payloadHash: String = S3Signer.emptyPayloadHash) async throws -> HTTPClientResponse {
        var request = HTTPClientRequest(url: signer.location.url(for: key))
        request.method = HTTPMethod(rawValue: method)
        for (name, value) in signer.signedHeaders(method: method, key: key, headers: headers, payloadHash: payloadHash, date: Date()) {
            request.headers.add(name: name, value: value)
        }
        for (name, value) in headers { request.headers.replaceOrAdd(name: name, value: value) }
        if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
        let response = try await HTTPClient.shared.execute(request, timeout: timeout)
        // The body (an error document, at most) is read and dropped so the connection is reused.
        _ = try? await response.body.collect(upTo: 1 << 20)
        return response
    }
}

public struct S3Error: Error, CustomStringConvertible {
    public var operation: String
    public var status: Int
    public var description: String { "object store \(operation) answered \(status)" }
}

extension S3Settings: RedactedDescription {}
extension S3Client: RedactedDescription {}
