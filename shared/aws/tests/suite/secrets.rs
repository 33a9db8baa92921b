//! Provider keys from the emulator's Secrets Manager and SSM Parameter Store: what the
//! functions read at init.

use agentlane_aws::aws_sdk_secretsmanager::Client as SecretsClient;
use agentlane_aws::aws_sdk_ssm::Client as SsmClient;
use agentlane_aws::aws_sdk_ssm::types::ParameterType;
use agentlane_aws::secrets::{SecretError, parameters_under, secret_string};

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

#[tokio::test]
async fn a_secret_string_is_read_by_arn_and_a_missing_one_is_named_without_values() {
    let sdk = crate::common::sdk().await;
    let name = unique("agentlane-test/provider-keys");
    let value = r#"{"openai": "sk-test-secret-value"}"#;
    let created = SecretsClient::new(&sdk)
        .create_secret()
        .name(&name)
        .secret_string(value)
        .send()
        .await
        .unwrap();
    let arn = created.arn.unwrap();

    assert_eq!(secret_string(&sdk, &arn).await.unwrap(), value);
    assert_eq!(
        secret_string(&sdk, &name).await.unwrap(),
        value,
        "by name too"
    );

    let missing = unique("agentlane-test/absent");
    let err = secret_string(&sdk, &missing).await.unwrap_err();
    assert!(
        matches!(&err, SecretError::Read { what, .. } if what == &missing),
        "{err}"
    );
}

#[tokio::test]
async fn secure_string_parameters_under_a_path_are_read_decrypted_by_last_segment() {
    let sdk = crate::common::sdk().await;
    let ssm = SsmClient::new(&sdk);
    let path = format!("/{}", unique("agentlane-test"));
    for (name, value) in [
        ("openai", "sk-ssm-openai"),
        ("anthropic", "sk-ssm-anthropic"),
    ] {
        ssm.put_parameter()
            .name(format!("{path}/{name}"))
            .value(value)
            .r#type(ParameterType::SecureString)
            .send()
            .await
            .unwrap();
    }
    // A deeper parameter is not the path's own.
    ssm.put_parameter()
        .name(format!("{path}/nested/other"))
        .value("not-mine")
        .r#type(ParameterType::SecureString)
        .send()
        .await
        .unwrap();

    let mut pairs = parameters_under(&sdk, &path).await.unwrap();
    pairs.sort();
    assert_eq!(
        pairs,
        [
            ("anthropic".to_owned(), "sk-ssm-anthropic".to_owned()),
            ("openai".to_owned(), "sk-ssm-openai".to_owned()),
        ]
    );
    assert!(
        parameters_under(&sdk, &format!("{path}-empty"))
            .await
            .unwrap()
            .is_empty()
    );
}
