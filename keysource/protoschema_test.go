package keysource

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// chargeDesc is the request message of the gRPC tests' service
// (test/grpctest), built here with the protobuf library alone: gRPC
// lives in a module of its own, and the root module does not require it.
//
//	message IdempotencyKey { string key = 1; int64 first_sent = 2; }
//	message Charge {
//	  string request_id = 1; int64 amount = 2; IdempotencyKey idempotency_key = 3;
//	  Charge child = 4; string behavior = 5; string note = 6;
//	}
var chargeDesc = func() protoreflect.MessageDescriptor {
	str, i64, msg := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(), descriptorpb.FieldDescriptorProto_TYPE_INT64.Enum(), descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum()
	field := func(name string, n int32, typ *descriptorpb.FieldDescriptorProto_Type, typeName string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Type: typ,
			Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), JsonName: proto.String(name)}
		if typeName != "" {
			f.TypeName = proto.String(typeName)
		}
		return f
	}
	fd := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("keysource/charge.proto"),
		Package: proto.String("idemtest.v1"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("IdempotencyKey"), Field: []*descriptorpb.FieldDescriptorProto{
				field("key", 1, str, ""), field("first_sent", 2, i64, "")}},
			{Name: proto.String("Charge"), Field: []*descriptorpb.FieldDescriptorProto{
				field("request_id", 1, str, ""), field("amount", 2, i64, ""),
				field("idempotency_key", 3, msg, ".idemtest.v1.IdempotencyKey"),
				field("child", 4, msg, ".idemtest.v1.Charge"),
				field("behavior", 5, str, ""), field("note", 6, str, "")}},
		},
	}
	f, err := protodesc.NewFile(fd, nil)
	if err != nil {
		panic("keysource test: the Charge descriptor: " + err.Error())
	}
	return f.Messages().ByName("Charge")
}()
