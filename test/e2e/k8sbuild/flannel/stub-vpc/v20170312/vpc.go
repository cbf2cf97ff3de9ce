// Package v20170312 stands in for the Tencent Cloud VPC SDK package of the
// same path, the one module flannel requires that the Go module proxy
// refuses. Only flannel's tencent-vpc backend imports it, and the e2e
// clusters never select that backend: every type and constructor that
// backend names is declared here, and every call to the cloud fails.
package v20170312

import "errors"

// ErrStub is what every Client call returns.
var ErrStub = errors.New("tencentcloud vpc: not available in this flanneld build (stub SDK)")

// Filter is a field filter of a describe request.
type Filter struct {
	Name   *string
	Values []*string
}

// Route is one route of a route table.
type Route struct {
	RouteId              *uint64
	DestinationCidrBlock *string
	GatewayType          *string
	GatewayId            *string
	RouteType            *string
	Enabled              *bool
}

// RouteTable is a VPC route table.
type RouteTable struct {
	RouteTableId *string
	RouteSet     []*Route
}

// DescribeRouteTablesRequest asks for the route tables matching Filters.
type DescribeRouteTablesRequest struct{ Filters []*Filter }

// DescribeRouteTablesResponse carries the route tables found.
type DescribeRouteTablesResponse struct {
	Response *struct{ RouteTableSet []*RouteTable }
}

// DeleteRoutesRequest deletes Routes from RouteTableId.
type DeleteRoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

// DeleteRoutesResponse is the answer to a DeleteRoutesRequest.
type DeleteRoutesResponse struct{}

// CreateRoutesRequest adds Routes to RouteTableId.
type CreateRoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

// CreateRoutesResponse is the answer to a CreateRoutesRequest.
type CreateRoutesResponse struct{}

// NewDescribeRouteTablesRequest returns an empty request.
func NewDescribeRouteTablesRequest() *DescribeRouteTablesRequest {
	return &DescribeRouteTablesRequest{}
}

// NewDeleteRoutesRequest returns an empty request.
func NewDeleteRoutesRequest() *DeleteRoutesRequest { return &DeleteRoutesRequest{} }

// NewCreateRoutesRequest returns an empty request.
func NewCreateRoutesRequest() *CreateRoutesRequest { return &CreateRoutesRequest{} }

// Client is a VPC API client that reaches nothing.
type Client struct{}

// NewClientWithSecretId returns a Client; it never contacts the cloud.
func NewClientWithSecretId(secretID, secretKey, region string) (*Client, error) {
	return &Client{}, nil
}

// DescribeRouteTables fails with ErrStub.
func (*Client) DescribeRouteTables(*DescribeRouteTablesRequest) (*DescribeRouteTablesResponse, error) {
	return nil, ErrStub
}

// DeleteRoutes fails with ErrStub.
func (*Client) DeleteRoutes(*DeleteRoutesRequest) (*DeleteRoutesResponse, error) {
	return nil, ErrStub
}

// CreateRoutes fails with ErrStub.
func (*Client) CreateRoutes(*CreateRoutesRequest) (*CreateRoutesResponse, error) {
	return nil, ErrStub
}
