// gRPC server reflection (v1 and v1alpha) over the descriptors protobuf-es
// already embeds in generated code, so `buf curl` and `grpcurl` can list and
// call every service without .proto files.
import { create, toBinary, type DescFile, type DescService } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import * as v1 from "@oz0/proto/grpc/reflection/v1/reflection_pb";
import * as v1alpha from "@oz0/proto/grpc/reflection/v1alpha/reflection_pb";

type ReflectionRequest = v1.ServerReflectionRequest;
type ReflectionResponse = v1.ServerReflectionResponse;

const NOT_FOUND = 5;
const UNIMPLEMENTED = 12;

/** Answers reflection requests for a set of services and everything they import. */
export class ReflectionIndex {
  readonly #serviceNames: string[];
  readonly #files = new Map<string, DescFile>();
  readonly #symbols = new Map<string, DescFile>();

  constructor(services: readonly DescService[]) {
    this.#serviceNames = services.map((s) => s.typeName).sort();
    const collect = (file: DescFile): void => {
      if (this.#files.has(file.proto.name)) return;
      this.#files.set(file.proto.name, file);
      for (const dep of file.dependencies) collect(dep);
    };
    for (const service of services) collect(service.file);
    for (const file of this.#files.values()) {
      for (const type of [...file.messages, ...file.enums, ...file.services, ...file.extensions]) {
        this.#index(type.typeName, file);
      }
      for (const service of file.services) {
        for (const method of service.methods) this.#index(`${service.typeName}.${method.name}`, file);
      }
      for (const message of file.messages) this.#indexNested(message, file);
    }
  }

  #index(name: string, file: DescFile): void {
    this.#symbols.set(name, file);
  }

  #indexNested(message: DescFile["messages"][number], file: DescFile): void {
    for (const nested of message.nestedMessages) {
      this.#index(nested.typeName, file);
      this.#indexNested(nested, file);
    }
    for (const nested of message.nestedEnums) this.#index(nested.typeName, file);
  }

  /** The file and, transitively, every file it imports, encoded as FileDescriptorProtos. */
  #withDependencies(file: DescFile): Uint8Array[] {
    const seen = new Set<string>();
    const out: Uint8Array[] = [];
    const visit = (f: DescFile): void => {
      if (seen.has(f.proto.name)) return;
      seen.add(f.proto.name);
      out.push(toBinary(FileDescriptorProtoSchema, f.proto));
      for (const dep of f.dependencies) visit(dep);
    };
    visit(file);
    return out;
  }

  answer(request: ReflectionRequest): ReflectionResponse {
    const base = { validHost: request.host, originalRequest: request };
    const error = (errorCode: number, errorMessage: string): ReflectionResponse =>
      create(v1.ServerReflectionResponseSchema, {
        ...base,
        messageResponse: { case: "errorResponse", value: { errorCode, errorMessage } },
      });
    const files = (file: DescFile | undefined, what: string): ReflectionResponse =>
      file
        ? create(v1.ServerReflectionResponseSchema, {
            ...base,
            messageResponse: {
              case: "fileDescriptorResponse",
              value: { fileDescriptorProto: this.#withDependencies(file) },
            },
          })
        : error(NOT_FOUND, `${what} not found`);
    const req = request.messageRequest;
    switch (req.case) {
      case "listServices":
        return create(v1.ServerReflectionResponseSchema, {
          ...base,
          messageResponse: {
            case: "listServicesResponse",
            value: { service: this.#serviceNames.map((name) => ({ name })) },
          },
        });
      case "fileByFilename":
        return files(this.#files.get(req.value), `file "${req.value}"`);
      case "fileContainingSymbol":
        return files(this.#symbols.get(req.value), `symbol "${req.value}"`);
      case "allExtensionNumbersOfType":
        return create(v1.ServerReflectionResponseSchema, {
          ...base,
          messageResponse: {
            case: "allExtensionNumbersResponse",
            value: { baseTypeName: req.value, extensionNumber: [] },
          },
        });
      case "fileContainingExtension":
        return error(NOT_FOUND, `no extensions of "${req.value.containingType}" are served`);
      default:
        return error(UNIMPLEMENTED, "empty reflection request");
    }
  }
}

export function reflectionServiceV1(index: ReflectionIndex): ServiceImpl<typeof v1.ServerReflection> {
  return {
    async *serverReflectionInfo(requests) {
      for await (const request of requests) yield index.answer(request);
    },
  };
}

/** v1alpha has the same messages under another package; convert through the binary form. */
export function reflectionServiceV1alpha(index: ReflectionIndex): ServiceImpl<typeof v1alpha.ServerReflection> {
  return {
    async *serverReflectionInfo(requests) {
      for await (const request of requests) {
        const asV1 = create(v1.ServerReflectionRequestSchema, {
          host: request.host,
          messageRequest: request.messageRequest as ReflectionRequest["messageRequest"],
        });
        const answer = index.answer(asV1);
        yield create(v1alpha.ServerReflectionResponseSchema, {
          validHost: answer.validHost,
          originalRequest: request,
          messageResponse: answer.messageResponse as v1alpha.ServerReflectionResponse["messageResponse"],
        });
      }
    },
  };
}
