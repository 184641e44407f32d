// Package grpctest is a small gRPC service for tests, written without protoc:
// its messages are dynamic (dynamicpb) over a descriptor built in code, its
// service a hand-written grpc.ServiceDesc, so real grpc-go clients and servers
// speak real protobuf through the proxy and Caddy. The server counts the
// executions of its calls; grpcupstream runs it as a process a test can kill.
//
//	package idemtest.v1;
//	message IdempotencyKey { string key = 1; int64 first_sent = 2; }
//	message Charge {
//	  string request_id = 1; int64 amount = 2; IdempotencyKey idempotency_key = 3;
//	  Charge child = 4; string behavior = 5; string note = 6;
//	}
//	message Receipt { string id = 1; int64 amount = 2; int64 execution = 3; }
//	service Payments {
//	  rpc Create(Charge) returns (Receipt);          // unary
//	  rpc Watch(Charge) returns (stream Receipt);    // server stream: three receipts
//	  rpc Upload(stream Charge) returns (Receipt);   // client stream: one receipt for all
//	  rpc Chat(stream Charge) returns (stream Receipt);
//	  rpc Count(Charge) returns (Receipt);           // executions so far, counting nothing
//	}
package grpctest

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// Service is the service's full name; Method paths are /Service/Name.
const Service = "idemtest.v1.Payments"

// Method paths.
const (
	Create = "/" + Service + "/Create"
	Watch  = "/" + Service + "/Watch"
	Upload = "/" + Service + "/Upload"
	Chat   = "/" + Service + "/Chat"
	Count  = "/" + Service + "/Count"
)

// The messages' descriptors.
var (
	KeyDesc     protoreflect.MessageDescriptor
	ChargeDesc  protoreflect.MessageDescriptor
	ReceiptDesc protoreflect.MessageDescriptor
)

func init() {
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
		Name:    proto.String("idemtest/v1/payments.proto"),
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
			{Name: proto.String("Receipt"), Field: []*descriptorpb.FieldDescriptorProto{
				field("id", 1, str, ""), field("amount", 2, i64, ""), field("execution", 3, i64, "")}},
		},
	}
	f, err := protodesc.NewFile(fd, nil)
	if err != nil {
		panic(fmt.Sprintf("grpctest: the descriptor: %v", err))
	}
	msgs := f.Messages()
	KeyDesc, ChargeDesc, ReceiptDesc = msgs.ByName("IdempotencyKey"), msgs.ByName("Charge"), msgs.ByName("Receipt")
}

// Charge is a request message.
type Charge struct {
	RequestID string // field 1
	Amount    int64  // field 2
	Key       string // field 3.1 (AEP-155's idempotency_key.key); none when empty
	FirstSent int64  // field 3.2
	Behavior  string // field 5: see Server
	Note      string // field 6
}

// Message is c as a protobuf message.
func (c Charge) Message() *dynamicpb.Message {
	m := dynamicpb.NewMessage(ChargeDesc)
	set := func(name string, v protoreflect.Value) { m.Set(ChargeDesc.Fields().ByName(protoreflect.Name(name)), v) }
	if c.RequestID != "" {
		set("request_id", protoreflect.ValueOfString(c.RequestID))
	}
	if c.Amount != 0 {
		set("amount", protoreflect.ValueOfInt64(c.Amount))
	}
	if c.Key != "" || c.FirstSent != 0 {
		k := dynamicpb.NewMessage(KeyDesc)
		k.Set(KeyDesc.Fields().ByName("key"), protoreflect.ValueOfString(c.Key))
		k.Set(KeyDesc.Fields().ByName("first_sent"), protoreflect.ValueOfInt64(c.FirstSent))
		set("idempotency_key", protoreflect.ValueOfMessage(k))
	}
	if c.Behavior != "" {
		set("behavior", protoreflect.ValueOfString(c.Behavior))
	}
	if c.Note != "" {
		set("note", protoreflect.ValueOfString(c.Note))
	}
	return m
}

// ChargeOf reads a request message.
func ChargeOf(m protoreflect.Message) Charge {
	f := ChargeDesc.Fields()
	c := Charge{
		RequestID: m.Get(f.ByName("request_id")).String(),
		Amount:    m.Get(f.ByName("amount")).Int(),
		Behavior:  m.Get(f.ByName("behavior")).String(),
		Note:      m.Get(f.ByName("note")).String(),
	}
	if k := m.Get(f.ByName("idempotency_key")).Message(); k.IsValid() {
		c.Key = k.Get(KeyDesc.Fields().ByName("key")).String()
		c.FirstSent = k.Get(KeyDesc.Fields().ByName("first_sent")).Int()
	}
	return c
}

// Receipt is a response message.
type Receipt struct {
	ID        string
	Amount    int64
	Execution int64 // the server's count of executions, this one included
}

// NewReceipt is an empty response message to decode into.
func NewReceipt() *dynamicpb.Message { return dynamicpb.NewMessage(ReceiptDesc) }

// Message is r as a protobuf message.
func (r Receipt) Message() *dynamicpb.Message {
	m := NewReceipt()
	f := ReceiptDesc.Fields()
	m.Set(f.ByName("id"), protoreflect.ValueOfString(r.ID))
	m.Set(f.ByName("amount"), protoreflect.ValueOfInt64(r.Amount))
	m.Set(f.ByName("execution"), protoreflect.ValueOfInt64(r.Execution))
	return m
}

// ReceiptOf reads a response message.
func ReceiptOf(m protoreflect.Message) Receipt {
	f := ReceiptDesc.Fields()
	return Receipt{ID: m.Get(f.ByName("id")).String(), Amount: m.Get(f.ByName("amount")).Int(),
		Execution: m.Get(f.ByName("execution")).Int()}
}
